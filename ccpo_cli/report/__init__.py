"""Reports over runs.db: the comparison document, its tables and the learning-curve plot.

Where a run's window starts is `report/window.py`'s (both rules and their descriptions).
"""

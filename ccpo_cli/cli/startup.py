"""What the `ccpo` process does before it parses its command line, to start fast.

sqlite-utils imports pandas when it is installed (about 0.9 s, more than the rest of ccpo's
start-up together), only to map `pandas.Timestamp` to a TEXT column when it guesses a column's
type from a value. ccpo never hands sqlite-utils a pandas value (every table is created with
declared types, every row is plain Python), so in the `ccpo` process that one import is refused:
a finder on `sys.meta_path` answers "not installed" to `import pandas` while, and only while,
`sqlite_utils.db` is executing. Any other import of pandas, before or after, is untouched, and
a library user who imports ccpo_cli gets sqlite-utils exactly as installed.
"""

from __future__ import annotations

import importlib.abc
import sys

# How far up the stack the import of pandas is looked for: importlib's own frames sit between.
_FRAMES = 40


class _PandasOutsideSqliteUtils(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "pandas" or "sqlite_utils.db" not in sys.modules:
            return None
        frame = sys._getframe(1)
        for _ in range(_FRAMES):
            if frame is None:
                break
            if (
                frame.f_globals.get("__name__") == "sqlite_utils.db"
                and frame.f_code.co_name == "<module>"
            ):
                # sqlite-utils catches ImportError: pandas is then "not installed" for it alone.
                raise ModuleNotFoundError(
                    "pandas is not imported for sqlite-utils in the ccpo process", name=name
                )
            frame = frame.f_back
        return None


def sqlite_utils_without_pandas() -> None:
    """Install the finder once, unless pandas or sqlite-utils is already imported."""
    if "pandas" in sys.modules or "sqlite_utils.db" in sys.modules:
        return
    if not any(isinstance(finder, _PandasOutsideSqliteUtils) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PandasOutsideSqliteUtils())

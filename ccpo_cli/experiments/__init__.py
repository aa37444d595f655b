"""Experiments: designs that run many trainings and compare them (docs/local-backend.md, "matrix").

This layer sits above the backends and the comparison: it decides which runs to train, hands
each one to a backend, and summarises them with `ccpo compare`'s document. `matrix` is the paired
arms × seeds design within a time budget; `blocks` trains one seed's runs; `ray_blocks` runs
those blocks as Ray tasks on a cluster.
"""

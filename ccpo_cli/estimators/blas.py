"""Threading for the estimator's many mid-sized products.

The whitening sweeps and per-bucket Gram matrices are products of a few milliseconds each; on a
shared machine OpenBLAS's worker threads then wait for cores more than they compute (measured 5-40x
slower than one thread under load). So BLAS runs on one thread, and the work is split instead:
`side_by_side` runs fixed row blocks, or independent buckets, on two Python threads (numpy releases
the GIL in products and ufuncs). A thread that finds no free core waits its turn instead of
spinning, and because the split is fixed, the rounding and so the result is the same on any
machine. The exact-SVD fallback, a single long factorisation, gets the library's usual threads
back. Without threadpoolctl the BLAS limits are no-ops.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext

import numpy as np

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # optional: only speed depends on it
    ThreadpoolController = None

_controller = None
_usual_threads: int | None = None


def _get_controller():
    global _controller, _usual_threads
    if _controller is None and ThreadpoolController is not None:
        _controller = ThreadpoolController()
        counts = [pool.num_threads for pool in _controller.select(user_api="blas").lib_controllers]
        _usual_threads = max(counts) if counts else None
    return _controller


def one_blas_thread() -> AbstractContextManager:
    controller = _get_controller()
    if controller is None:
        return nullcontext()
    return controller.limit(limits=1, user_api="blas")


def usual_blas_threads() -> AbstractContextManager:
    controller = _get_controller()
    if controller is None or _usual_threads is None:
        return nullcontext()
    return controller.limit(limits=_usual_threads, user_api="blas")


ROW_BLOCKS = 2  # fixed, so that the rounding (and so the result) is the same on any machine


class SideBySide:
    """Maps work over items or fixed row blocks, on threads when the machine has the cores."""

    def __init__(self, pool: ThreadPoolExecutor | None):
        self._pool = pool

    def map(self, work: Callable, items: Iterable) -> list:
        """[work(item) for item in items], in order."""
        if self._pool is None:
            return [work(item) for item in items]
        return [future.result() for future in [self._pool.submit(work, item) for item in items]]

    def over_rows(self, n_rows: int, work: Callable[[int, int], object]) -> list:
        """work(lo, hi) for each of the ROW_BLOCKS contiguous blocks of range(n_rows)."""
        bounds = np.linspace(0, n_rows, ROW_BLOCKS + 1).astype(int)
        spans = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
        return self.map(lambda span: work(*span), spans)

    def sum_over_rows(self, n_rows: int, work: Callable[[int, int], np.ndarray]) -> np.ndarray:
        """The sum of work(lo, hi) over the row blocks, added in block order."""
        parts = self.over_rows(n_rows, work)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total


@contextmanager
def side_by_side() -> Iterator[SideBySide]:
    """Two workers with one BLAS thread each; a fresh pool per call, so it is safe across fork."""
    workers = min(ROW_BLOCKS, os.cpu_count() or 1)
    with one_blas_thread():
        if workers < 2:
            yield SideBySide(None)
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ccpo-estimator") as pool:
            yield SideBySide(pool)

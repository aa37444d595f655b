"""Run a callback right after a module is imported, without importing it ahead of time.

The setup hook runs in every Ray worker, including the many small environment workers that
never import the trainer; importing verl there just to patch it would cost each of them seconds
and memory. A meta-path finder defers each patch until its module is actually loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Callback = Callable[[ModuleType], None]


class _RunAfterExec(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, callbacks: list[Callback]):
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.pending: dict[str, list[Callback]] = {}
        self._lock = threading.Lock()

    def find_spec(self, fullname, path, target=None):
        with self._lock:
            callbacks = self.pending.pop(fullname, None)
        if callbacks is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            with self._lock:  # not importable (yet): keep waiting
                self.pending.setdefault(fullname, []).extend(callbacks)
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _RunAfterExec(spec.loader, callbacks)
        return spec


_FINDER = _AfterImportFinder()


def when_imported(module_name: str, callback: Callback) -> None:
    """Call `callback(module)` now if `module_name` is loaded, else right after it loads."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    with _FINDER._lock:
        _FINDER.pending.setdefault(module_name, []).append(callback)

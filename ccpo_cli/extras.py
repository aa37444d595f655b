"""Optional runtimes: the one check, and the one message, for a package an extra installs.

ccpo's core (runs.db, compare, cards, publish) needs none of torch, Ray, pyarrow or TensorBoard;
the command that does imports it through `require_extra`, so a machine without it gets one line
naming the extra to install instead of a traceback (docs/architecture.md §4, exit 1).
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from ccpo_cli.errors import CcpoError


class MissingExtra(CcpoError):
    """A package of an optional extra is not installed (a runtime failure: exit 1)."""

    def __init__(self, what: str, extra: str, module: str):
        super().__init__(
            f"{what} needs the '{extra}' extra ({module} is not installed): pip install 'ccpo[{extra}]'",
            exit_code=1,
        )
        self.extra, self.module = extra, module


def require_extra(extra: str, module: str, *, what: str | None = None) -> ModuleType:
    """Import `module`, or refuse with the extra that installs it.

    `what` names the feature in the message ("ccpo train --backend local"); by default the module.
    Only a missing module is translated: a package that is installed but broken raises its own
    error, which is a bug to see, not an extra to install.
    """
    try:
        return import_module(module)
    except ImportError as error:
        missing = getattr(error, "name", None) or module
        if missing.split(".")[0] != module.split(".")[0]:
            raise  # the package is there; one of its own imports failed
        raise MissingExtra(what or module, extra, module) from None


def check_extra(extra: str, module: str, *, what: str | None = None) -> None:
    """Refuse as `require_extra` does, without importing the module yet (a check before a long
    run whose tracker is imported later)."""
    from importlib.util import find_spec

    if find_spec(module) is None:
        raise MissingExtra(what or module, extra, module)

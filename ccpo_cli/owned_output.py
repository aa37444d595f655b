"""ccpo deletes and replaces only what it wrote.

Every output that a later command replaces (an export's TensorBoard folder or CSV file, a
staging folder) is written with a marker: a folder holds a regular file `MARKER` (`.ccpo-output`)
and a file has a sibling `.NAME.ccpo-output`. `replace_owned` puts a freshly written output in
place of the old one only when the old one is absent or carries that marker; anything else (a
user's file or folder, a symlink, a run folder) is refused with InvalidInput (exit 3), and
nothing of the user's is renamed, moved or deleted. A run folder (one holding `run.json`, the
identity a trainer writes) is never an output target, marker or not, and neither is a folder
inside one.

What is being written goes to a fresh hidden sibling (`.NAME.XXXX.partial`, made with `mkdtemp`
or `mkstemp`, so it never is an existing path). If writing fails (a full disk, a folder that
cannot be written) the partial output is removed, the old output stays as it was, and the
failure is one line: `output_error` turns the OSError into InvalidInput (exit 3) for a target
that cannot be written (permission, read-only file system, not a folder) and into CcpoError
(exit 1) for a full disk or a file-size limit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ccpo_cli.errors import CcpoError, InvalidInput

MARKER = ".ccpo-output"
RUN_IDENTITY_FILE = "run.json"  # written by a trainer into its run folder (backends/local)
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _marker_of(target: Path) -> Path:
    return target / MARKER if target.is_dir() else target.with_name(f".{target.name}{MARKER}")


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def run_folder_around(path: Path) -> Path | None:
    """The run folder `path` is, or lies in (a folder holding run.json), or None."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return None
    for folder in (resolved, *resolved.parents):
        if _is_regular(folder / RUN_IDENTITY_FILE):
            return folder
    return None


def check_output_folder(out: Path, option: str = "--out") -> None:
    """`out` can hold ccpo's outputs: a folder (or nothing yet), not a file, not a run folder."""
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"{option} {out}: is a file, not a folder (name a folder to write into)")
    run_folder = run_folder_around(out)
    if run_folder is not None:
        raise InvalidInput(
            f"{option} {out}: is inside the run folder {run_folder} (it holds "
            f"{RUN_IDENTITY_FILE}); a run folder is never an output target, name another folder"
        )


def check_replaceable(target: Path, option: str = "--out") -> None:
    """InvalidInput unless `target` is absent or ccpo's own marked output (never a run folder)."""
    if not os.path.lexists(target):
        return
    if target.is_symlink():
        raise InvalidInput(
            f"{option}: {target} is a symbolic link, not ccpo's output; refusing to replace it "
            "(move it away or name another folder)"
        )
    if target.is_dir() and _is_regular(target / RUN_IDENTITY_FILE):
        raise InvalidInput(
            f"{option}: {target} is a run folder (it holds {RUN_IDENTITY_FILE}); a run folder is "
            "never replaced by an output, name another folder"
        )
    if not _is_regular(_marker_of(target)):
        kind = "folder" if target.is_dir() else "file"
        raise InvalidInput(
            f"{option}: {target} is a {kind} ccpo did not write (no {MARKER} marker); refusing to "
            "replace it (move it away or name another folder)"
        )


def mark_owned(folder: Path, what: str) -> None:
    """Write the marker into a folder a tracker's own writer made for ccpo (a wandb run folder),
    so that a later export may replace it."""
    (folder / MARKER).write_text(f"written by {what}\n", encoding="utf-8")


def remove_owned(target: Path, option: str = "--out") -> None:
    """Delete an earlier output of ccpo's; InvalidInput (nothing deleted) for anything else."""
    check_replaceable(target, option)
    _remove(target)


def output_error(error: OSError, target: Path, option: str = "--out") -> CcpoError:
    """The one line for an OSError met while writing `target`."""
    reason = error.strerror or str(error)
    if error.errno in _FULL:
        return CcpoError(
            f"{option}: writing {target} failed: {reason} (the disk is full or a file-size limit "
            "was reached); nothing was replaced and the partial files were removed"
        )
    if error.errno in _NOT_WRITABLE:
        return InvalidInput(
            f"{option}: cannot write {target}: {reason}; nothing was replaced "
            "(name a folder you can write)"
        )
    return CcpoError(f"{option}: writing {target} failed: {reason}; nothing was replaced")


@contextlib.contextmanager
def mapped_os_errors(target: Path, option: str = "--out") -> Iterator[None]:
    """OSError inside the block as `output_error`'s one line."""
    try:
        yield
    except OSError as error:
        raise output_error(error, target, option) from None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def replace_owned(
    target: Path,
    write: Callable[[Path], None],
    *,
    folder: bool,
    what: str,
    option: str = "--out",
) -> None:
    """Write an output with `write(partial)` and put it at `target`: a folder (`folder=True`,
    `write` fills the given empty folder) or a file (`write` writes the given path). Refused
    (InvalidInput, nothing written) when `target` is something ccpo did not write; on any failure
    the partial output is removed and the old one is left as it was."""
    parent = target.parent
    with mapped_os_errors(parent, option):
        check_output_folder(parent, option)
        check_replaceable(target, option)
        parent.mkdir(parents=True, exist_ok=True)
    with mapped_os_errors(target, option):
        if folder:
            _replace_folder(target, write, what, option)
        else:
            _replace_file(target, write, what, option)


def _replace_folder(target: Path, write: Callable[[Path], None], what: str, option: str) -> None:
    """A fresh hidden folder filled by `write` and marked, put at `target`: the old output is
    moved aside first (checked again: it may have changed meanwhile), put back if the move of the
    new one fails, and removed once the new one is in place."""
    partial = Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    )
    old: Path | None = None
    placed = False
    try:
        write(partial)
        mark_owned(partial, what)
        if os.path.lexists(target):
            check_replaceable(target, option)  # again: it may have changed meanwhile
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            os.rename(target, old / target.name)
        try:
            os.rename(partial, target)
        except OSError:
            if old is not None:  # the old output back where it was
                os.rename(old / target.name, target)
            raise
        placed = True
    finally:
        if not placed:
            _remove(partial)
        if old is not None:
            _remove(old)


def _replace_file(target: Path, write: Callable[[Path], None], what: str, option: str) -> None:
    """A fresh hidden file written by `write`, its marker beside `target`, put in place by one
    atomic replace (checked again just before); removed when anything fails."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(handle)
    partial = Path(name)
    try:
        write(partial)
        marker = _marker_of(target)
        if not _is_regular(marker):
            marker.write_text(f"written by {what}\n", encoding="utf-8")
        check_replaceable(target, option)
        os.replace(partial, target)
    except BaseException:
        _remove(partial)
        raise


__all__ = [
    "MARKER",
    "RUN_IDENTITY_FILE",
    "check_output_folder",
    "check_replaceable",
    "mark_owned",
    "mapped_os_errors",
    "output_error",
    "remove_owned",
    "replace_owned",
    "run_folder_around",
]

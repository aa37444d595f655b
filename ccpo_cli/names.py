"""Run names and Hub repository ids are data, never paths.

A run name ends up in folder names (`ccpo-card-RUN`, `ccpo-publish-RUN`), in card titles and
in commit messages, so it is held to one rule everywhere a name comes in (ingest, eval, train,
card, publish):

- 1 to 100 characters (`RUN_NAME_MAX`), so that a folder built from it stays well under the
  255-byte file-name limit of common filesystems;
- ASCII letters, digits, `.`, `_` and `-`, starting with a letter or a digit (no separators,
  no spaces, no control characters, no newline: the whole name must match, not a prefix);
- no `..` anywhere.

A run pulled from another machine whose name is already taken here by a different run (another
global id) is stored as `NAME@HOST`, HOST being the machine that created it (`ccpo sync pull`,
docs/sync.md): the rule above for NAME, then one `@` and a host label (`host_label`: ASCII
letters, digits, `.` and `-`, at most `HOST_LABEL_MAX` characters).

Repository ids follow the Hub's own rule, checked by huggingface_hub's `validate_repo_id`
(the same function in the 0.3x and 1.x/2.x lines), and must name an owner: `owner/name`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ccpo_cli.errors import InvalidInput

RUN_NAME_MAX = 100
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HOST_LABEL_MAX = 64
HOST_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")


def host_label(text: str | None) -> str:
    """A machine name as ccpo records it: runs of other characters become `-`, at most
    HOST_LABEL_MAX characters, `unknown-host` when no name is given. A name with characters
    outside ASCII (`ünï`, `日本`) keeps what is left and adds `-` and 8 hex digits of its
    sha256, so two such machines never share a label (nor take `unknown-host`); an ASCII name
    keeps the label it always had."""
    text = str(text or "")
    label = re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip(".-")[:HOST_LABEL_MAX].strip(".-")
    label = re.sub(r"\.{2,}", ".", label)
    if not text.isascii():
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        kept = label[: HOST_LABEL_MAX - len(digest) - 1].strip(".-")
        return f"{kept}-{digest}" if kept else f"host-{digest}"
    return label if label and HOST_LABEL.fullmatch(label) else "unknown-host"


def qualified_run_name(name: str, host: str) -> str:
    """`NAME@HOST`: how a run of another machine is shown when NAME is taken here."""
    return check_run_name(f"{name.partition('@')[0]}@{host_label(host)}")


def check_run_name(name: object, option: str = "--run") -> str:
    """The name unchanged, or InvalidInput (exit 3) saying which part of the rule it breaks; any
    value is checked (names also come from synced rows), so one that is no text is refused."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{option}: a run name is needed")
    base, at, host = name.partition("@")
    if at:
        if not HOST_LABEL.fullmatch(host) or len(host) > HOST_LABEL_MAX or ".." in host:
            raise InvalidInput(
                f"{option} {name!r}: after '@' comes the host label of the machine that "
                f"created the run (letters, digits, '.' and '-', at most {HOST_LABEL_MAX})"
            )
        check_run_name(base, option)
        return name
    if len(name) > RUN_NAME_MAX:
        raise InvalidInput(
            f"{option}: run name is {len(name)} characters long; at most {RUN_NAME_MAX}"
        )
    if not RUN_NAME.fullmatch(name) or ".." in name:
        raise InvalidInput(
            f"{option} {name!r}: a run name is letters, digits, '.', '_' and '-', starting with a "
            "letter or digit, without '..' (it is used in folder names)"
        )
    return name


def check_repo_id(repo_id: str, option: str = "--repo") -> str:
    """An `owner/name` id the Hub accepts, or InvalidInput (exit 3)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise InvalidInput(f"{option} {repo_id!r} is not a Hub repository id (owner/name)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        reason = str(error).replace("\n", "\\n") or "rejected"
        raise InvalidInput(
            f"{option} {repo_id!r} is not a Hub repository id (owner/name): {reason}"
        ) from None
    # validate_repo_id's pattern allows a trailing newline in some versions (`$`-style ends);
    # a repository id is one line of the allowed characters, nothing else.
    if not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", repo_id):
        raise InvalidInput(f"{option} {repo_id!r} is not a Hub repository id (owner/name)")
    return repo_id


def default_folder(prefix: str, run: str) -> Path:
    """The default output folder of a command for a run: PREFIX-RUN in the working directory."""
    return Path(f"{prefix}-{check_run_name(run)}")


def require_inside(path: Path, base: Path, option: str) -> Path:
    """`path` if it resolves inside `base` (symlinks followed), else InvalidInput (exit 3)."""
    resolved = path.resolve()
    root = base.resolve()
    if resolved != root and root not in resolved.parents:
        raise InvalidInput(f"{option} {path}: resolves to {resolved}, outside {root}; refused")
    return path

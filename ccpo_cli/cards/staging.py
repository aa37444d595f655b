"""Writing a card to disk: README.md, the summary JSON and the learning curve, side by side.

The folder this produces is exactly what a publish commits (paths relative to the folder are
the paths in the Hub repository), so `ccpo card` and `ccpo publish --dry-run` show the user
the very files that would be pushed.

Writes never clobber: an existing README that ccpo did not write (it has no ccpo regions) is
refused unless `force`, and so are existing files under results/ beside it. A README that
ccpo wrote is either re-rendered inside its fences, keeping the person's edits around them
(`merge_existing`, as `ccpo card` does), or replaced (a publish staging folder). Each file is
written to a temporary name and renamed, so a full disk never leaves half a README.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.cards.context import PLOT_PATH, SUMMARY_PATH, CardContext, build_card_context
from ccpo_cli.cards.fences import has_regions, merge_into_remote
from ccpo_cli.cards.lint import lint_card, require_clean
from ccpo_cli.cards.render import render_card
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.names import check_repo_id, check_run_name
from ccpo_cli.report.plot import plot_learning_curves
from ccpo_cli.vocabulary import INTERIM

README_PATH = "README.md"


@dataclass
class StagedCard:
    folder: Path
    readme: Path
    files: dict[str, Path]  # path in the repository -> local file
    text: str
    card_hash: str
    context: CardContext


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stage_card(
    db: sqlite_utils.Database,
    run: str,
    readme_path: str | Path,
    *,
    status: str = INTERIM,
    repo_id: str | None = None,
    window_start: int | None = None,
    license: str | None = None,  # noqa: A002 - the metadata key's name
    checkpoint_step: int | None = None,
    weights: Mapping[str, Any] | None = None,
    sending_checkpoint: bool = False,
    force: bool = False,
    merge_existing: bool = False,
    clobber_hint: str = "--force to replace it",
) -> StagedCard:
    """Render and lint the card of `run`, then write README (at `readme_path`), the summary JSON
    and the learning-curve PNG (under results/ beside it). Nothing is written if the card fails
    the offline lint or would clobber a file ccpo did not write (InvalidInput, exit 3); a failed
    write (disk full, read-only folder) is a CcpoError (exit 1)."""
    check_run_name(run)
    if repo_id is not None:
        check_repo_id(repo_id, "--repo-id")
    context = build_card_context(
        db,
        run,
        status=status,
        repo_id=repo_id,
        window_start=window_start,
        weights=weights,
        license=license,
        checkpoint_step=checkpoint_step,
        sending_checkpoint=sending_checkpoint,
    )
    text = render_card(context)
    require_clean(text, f"the card of run {run!r}")
    readme = Path(readme_path)
    existing = _existing_readme(readme)
    ours = existing is not None and has_regions(existing)
    if not force and not ours:
        _refuse_clobbering(readme, existing, clobber_hint)
    if ours and merge_existing and existing is not None and existing != text:  # ours: it exists
        text = _merged(readme, existing, text)
    return _write_card(readme, text, context)


def _write_card(readme: Path, text: str, context: CardContext) -> StagedCard:
    """Write the README, the summary JSON and the learning-curve PNG, all or none of them."""
    folder = readme.parent
    try:
        (folder / "results").mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InvalidInput(f"{folder}: cannot create the card folder ({error.strerror})") from None
    summary_file = folder / SUMMARY_PATH
    plot_file = folder / PLOT_PATH
    summary = json.dumps(context.summary, indent=2, sort_keys=True, allow_nan=False) + "\n"
    _write_all(
        {
            summary_file: lambda tmp: tmp.write_text(summary, encoding="utf-8"),
            plot_file: lambda tmp: plot_learning_curves(context.comparison, tmp),
            readme: lambda tmp: tmp.write_text(text, encoding="utf-8"),
        }
    )
    return StagedCard(
        folder=folder,
        readme=readme,
        files={README_PATH: readme, SUMMARY_PATH: summary_file, PLOT_PATH: plot_file},
        text=text,
        card_hash=sha256_text(text),
        context=context,
    )


def _refuse_clobbering(readme: Path, existing: str | None, clobber_hint: str) -> None:
    """InvalidInput when the README, or a results file beside it, exists and ccpo did not write
    the README (it has no ccpo regions): a user's files are never overwritten."""
    if existing is not None:
        raise InvalidInput(
            f"{readme}: exists and was not written by ccpo (no ccpo regions); "
            f"refusing to overwrite it ({clobber_hint})"
        )
    folder = readme.parent
    taken = [str(folder / name) for name in (SUMMARY_PATH, PLOT_PATH) if (folder / name).exists()]
    if taken:
        raise InvalidInput(
            f"{', '.join(taken)}: exist(s) beside a README ccpo did not write; "
            f"refusing to overwrite ({clobber_hint})"
        )


def _merged(readme: Path, existing: str, text: str) -> str:
    """The card's regions merged into the README ccpo wrote before, linted: only ccpo's own
    parts are checked, the hand-written prose around them is the owner's."""
    text = merge_into_remote(existing, text)
    problems = [p for p in lint_card(text, allow_extra_keys=True) if not p.startswith("body line")]
    if problems:
        raise InvalidInput(
            f"{readme}: the card merged into the existing README fails the lint: "
            + "; ".join(problems)
        )
    return text


def _existing_readme(readme: Path) -> str | None:
    if readme.is_dir():
        raise InvalidInput(f"{readme}: is a folder; give the path of the README file to write")
    if not readme.exists() and not readme.is_symlink():
        return None
    if not readme.is_file():
        raise InvalidInput(f"{readme}: exists and is not a regular file; refusing to write over it")
    try:
        return readme.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""  # not text ccpo wrote
    except OSError as error:
        raise InvalidInput(f"{readme}: cannot read the existing file ({error.strerror})") from None


def _write_all(writers: dict) -> None:
    """Write every file under a temporary name beside it (same suffix, for the PNG writer), then
    rename them all: a failed write (full disk) leaves none of them changed."""
    temporary = {path: path.with_name(f".{path.stem}.ccpo-tmp{path.suffix}") for path in writers}
    try:
        for path, write in writers.items():
            write(temporary[path])
    except OSError as error:
        for tmp in temporary.values():
            tmp.unlink(missing_ok=True)
        raise CcpoError(f"{path}: cannot write ({error.strerror or error})") from None
    for path, tmp in temporary.items():
        os.replace(tmp, path)

"""Game folders: finding games, the shipped sets, and checking games with the planner.

The shipped sets are fixed by manifests in configs/games/ (game id, task type, content hash,
walkthrough), not by shipped game files: `materialize()` regenerates the games from the
manifest's (split, seed, room) with the stored walkthroughs into a cache folder, and checks
every game's bytes against its hash, so every machine plays the same games and a changed
engine or generator is caught instead of silently changing the panel.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ccpo_cli.envs.engine import default_cache_dir, game_id
from ccpo_cli.envs.generate import content_hash, game_files, game_specs
from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import configs_dir

HELDOUT_MANIFEST = "heldout-manifest.json"
POOL_MANIFEST = "pool-manifest.json"
_STAMP = ".ccpo-verified"


def find_games(root: str | os.PathLike) -> list[str]:
    """Every playable game under `root` (ALFWorld json_2.1.1 layout, any depth): folders with a
    traj_data.json and a game.tw-pddl marked solvable, skipping `movable` and `Sliced` ones as
    ALFWorld does. Sorted by path, so the order never depends on the filesystem."""
    base = Path(root)
    if not base.is_dir():
        raise InvalidInput(f"{root}: not a folder")
    games = []
    for traj in base.rglob("traj_data.json"):
        folder = traj.parent
        if "movable" in str(folder) or "Sliced" in str(folder):
            continue
        game_file = folder / "game.tw-pddl"
        if not game_file.is_file():
            continue
        try:
            game = json.loads(game_file.read_text())
        except (OSError, ValueError, RecursionError) as error:
            raise InvalidInput(f"{game_file}: not valid JSON ({error})") from None
        if not isinstance(game, dict):
            raise InvalidInput(
                f"{game_file}: not an ALFWorld game (a JSON object is expected, "
                f"found a {type(game).__name__})"
            )
        solvable = game.get("solvable", False)
        if solvable:
            games.append(str(game_file.resolve()))
    return sorted(games)


# ---- the shipped sets ----------------------------------------------------------------------


def manifest_path(name: str) -> Path:
    return configs_dir() / "games" / name


def load_manifest(path: str | os.PathLike) -> dict:
    try:
        manifest = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise InvalidInput(f"{path}: unreadable manifest ({error})") from None
    for key in ("split", "seed", "room", "games"):
        if key not in manifest:
            raise InvalidInput(f"{path}: manifest has no {key!r}")
    return manifest


def games_cache_dir() -> Path:
    """Where shipped sets are materialized: $CCPO_GAMES_DIR, else <ccpo cache>/games."""
    explicit = os.environ.get("CCPO_GAMES_DIR")
    return Path(explicit) if explicit else default_cache_dir() / "games"


def _manifest_digest(manifest: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]


def _verify_folder(folder: Path, manifest: dict) -> list[str]:
    paths = []
    for entry in manifest["games"]:
        game_folder = folder / entry["game_id"]
        files = {
            name: (game_folder / name).read_bytes() for name in ("game.tw-pddl", "traj_data.json")
        }
        if content_hash(files) != entry["sha256"]:
            raise InvalidInput(f"{game_folder}: content hash differs from the manifest")
        paths.append(str((game_folder / "game.tw-pddl").resolve()))
    return sorted(paths)


def _valid_paths(folder: Path, manifest: dict) -> list[str] | None:
    """The folder's verified game paths, or None when it is missing, unfinished or damaged."""
    if not (folder / _STAMP).is_file():
        return None
    try:
        return _verify_folder(folder, manifest)
    except (OSError, InvalidInput):
        return None


def materialize(
    manifest_file: str | os.PathLike, cache_dir: str | os.PathLike | None = None
) -> list[str]:
    """The game paths (sorted) of a manifest's set, regenerated into the cache on first use and
    verified against the manifest's hashes every time (reading ~35 KB per game)."""
    manifest = load_manifest(manifest_file)
    root = Path(cache_dir) if cache_dir is not None else games_cache_dir()
    name = Path(manifest_file).name.removesuffix(".json")
    folder = root / f"{name}-{_manifest_digest(manifest)}"
    cached = _valid_paths(folder, manifest)
    if cached is not None:
        return cached
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        _regenerate(scratch, manifest, Path(manifest_file))
        _verify_folder(scratch, manifest)  # raises on a mismatch
        (scratch / _STAMP).write_text("ok\n")
        if folder.exists() and _valid_paths(folder, manifest) is None:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            scratch.rename(folder)
        except OSError:
            pass  # another process finished first; its folder is equally valid
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return _verify_folder(folder, manifest)


def _regenerate(target: Path, manifest: dict, manifest_file: Path) -> None:
    wanted = {entry["game_id"]: entry for entry in manifest["games"]}
    specs = game_specs(manifest["split"], int(manifest["seed"]), manifest["room"])
    last_index = max(int(entry["index"]) for entry in manifest["games"])
    for spec in specs:
        if spec.index > last_index:
            break
        entry = wanted.pop(spec.game_id, None)
        if entry is None:
            continue
        files = game_files(spec, list(entry["walkthrough"]))
        if content_hash(files) != entry["sha256"]:
            raise InvalidInput(
                f"{manifest_file}: game {spec.game_id} regenerates with different content; "
                "the installed alfworld/textworld differ from the manifest's "
                f"{manifest.get('engine', {})}"
            )
        folder = target / spec.folder / spec.trial
        folder.mkdir(parents=True)
        for file_name, data in files.items():
            (folder / file_name).write_bytes(data)
    if wanted:
        raise InvalidInput(
            f"{manifest_file}: {len(wanted)} games could not be regenerated, "
            f"e.g. {next(iter(wanted))}"
        )


def manifest_name(name: str, room: str = "small") -> str:
    """The manifest of a shipped set in a room size: `heldout-manifest.json` for the small
    rooms, `large-heldout-manifest.json` for the search-sized ones."""
    return name if room == "small" else f"{room}-{name}"


def heldout_panel(cache_dir: str | os.PathLike | None = None, room: str = "small") -> list[str]:
    """The 128-game held-out panel (balanced over the six types), as sorted game paths."""
    return materialize(manifest_path(manifest_name(HELDOUT_MANIFEST, room)), cache_dir)


def training_pool(cache_dir: str | os.PathLike | None = None, room: str = "small") -> list[str]:
    """The training pool (600 games, disjoint from the panel), as sorted game paths."""
    return materialize(manifest_path(manifest_name(POOL_MANIFEST, room)), cache_dir)


# ---- checking games ------------------------------------------------------------------------


@dataclass
class GameCheck:
    game_id: str
    task_type: str
    path: str
    ok: bool
    steps: int = 0
    error: str = ""


@dataclass
class CheckReport:
    games: list[GameCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.games) and all(g.ok for g in self.games)

    @property
    def failures(self) -> list[GameCheck]:
        return [g for g in self.games if not g.ok]

    def by_type(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for game in self.games:
            row = counts.setdefault(game.task_type, {"games": 0, "ok": 0})
            row["games"] += 1
            row["ok"] += int(game.ok)
        return counts


def _check_one(path: str) -> GameCheck:
    from ccpo_cli.envs.generate import plan_and_replay

    gid = game_id(path)
    task_type = _task_type_of(path)
    try:
        plan = plan_and_replay(path)
        return GameCheck(gid, task_type, path, True, len(plan))
    except InvalidInput as error:
        return GameCheck(gid, task_type, path, False, error=str(error).replace(f"{path}: ", ""))
    except Exception as error:  # noqa: BLE001 - one broken game must not hide the others
        return GameCheck(gid, task_type, path, False, error=f"{type(error).__name__}: {error}")


def _task_type_of(path: str) -> str:
    from ccpo_cli.task_types import short_key

    folder = Path(path).parent
    try:
        return short_key(json.loads((folder / "traj_data.json").read_text())["task_type"])
    except (OSError, ValueError, KeyError):
        try:
            return short_key(folder.parent.name)
        except KeyError:
            return "?"


def check_games(
    root: str | os.PathLike, workers: int = 1, progress: Callable[[int, int], None] | None = None
) -> CheckReport:
    """Load every game under `root` in the real engine and play its walkthrough (the stored
    one, else the planner's): each must not be won at step 0 and must be won exactly at the
    walkthrough's last step."""
    paths = find_games(root)
    if not paths:
        raise InvalidInput(f"{root}: no ALFWorld games (traj_data.json + game.tw-pddl) found")
    from ccpo_cli.envs import memo

    report = CheckReport()
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers, initializer=memo.install) as executor:
            for check in executor.map(_check_one, paths):
                report.games.append(check)
                if progress:
                    progress(len(report.games), len(paths))
        return report
    was_installed = memo.installed()
    memo.install()
    try:
        for path in paths:
            report.games.append(_check_one(path))
            if progress:
                progress(len(report.games), len(paths))
    finally:
        if not was_installed:
            memo.uninstall()
    return report

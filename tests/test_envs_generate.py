"""Game generation: deterministic bytes, all six types, planner-validated, the shipped sets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers_envs import games_cache, panel_paths

from ccpo_cli.envs import check_games, find_games, generate_games
from ccpo_cli.envs.games import (
    HELDOUT_MANIFEST,
    POOL_MANIFEST,
    load_manifest,
    manifest_path,
    materialize,
)
from ccpo_cli.envs.generate import TYPE_ORDER, game_specs
from ccpo_cli.errors import InvalidInput
from ccpo_cli.task_types import TASK_TYPES


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def six_games(tmp_path_factory):
    out = tmp_path_factory.mktemp("six")
    games = generate_games(out, "train", 6, seed=3)
    return out, games


def test_same_seed_gives_identical_bytes(six_games, tmp_path):
    out, games = six_games
    again = generate_games(tmp_path, "train", 6, seed=3)
    assert _tree_bytes(out) == _tree_bytes(tmp_path)
    assert [g.sha256 for g in games] == [g.sha256 for g in again]


def test_other_seed_or_split_gives_other_games():
    def problems(split, seed):
        specs = game_specs(split, seed)
        return [next(specs).problem.split("\n", 1)[1] for _ in range(12)]

    base = problems("train", 3)
    assert base != problems("train", 4)
    assert base != problems("heldout", 3)


def test_all_six_types_in_engine_layout(six_games):
    out, games = six_games
    assert [g.task_type for g in games] == list(TYPE_ORDER)
    for game in games:
        folder = Path(game.path).parent
        traj = json.loads((folder / "traj_data.json").read_text())
        document = json.loads((folder / "game.tw-pddl").read_text())
        assert traj["task_type"] == TASK_TYPES[game.task_type]
        assert folder.parent.name.startswith(traj["task_type"] + "-")
        assert document["solvable"] is True
        assert "UNKNOWN GOAL" not in document["grammar"]
        assert document["walkthrough"] == list(game.walkthrough) and len(game.walkthrough) >= 3
    assert find_games(out) == sorted(g.path for g in games)


def test_small_rooms_by_default_larger_on_request(tmp_path):
    def receptacle_count(spec):
        line = next(text for text in spec.problem.splitlines() if text.endswith("- receptacle"))
        return len(line.split()) - 2

    small = game_specs("train", 0, "small")
    large = game_specs("train", 0, "large")
    small_counts = [receptacle_count(next(small)) for _ in range(60)]
    large_counts = [receptacle_count(next(large)) for _ in range(60)]
    assert max(small_counts) <= 6 and min(small_counts) >= 3
    assert max(large_counts) > 6
    large_games = generate_games(tmp_path, "train", 3, seed=1, room="large")
    assert len(large_games) == 3
    report = check_games(tmp_path)
    assert report.ok and len(report.games) == 3


def test_check_catches_a_broken_walkthrough(six_games, tmp_path):
    out, games = six_games
    broken = tmp_path / "broken"
    folder = broken / Path(games[0].path).parent.relative_to(out)
    folder.mkdir(parents=True)
    for name in ("traj_data.json", "game.tw-pddl"):
        (folder / name).write_bytes((Path(games[0].path).parent / name).read_bytes())
    document = json.loads((folder / "game.tw-pddl").read_text())
    document["walkthrough"] = document["walkthrough"][:-1]
    (folder / "game.tw-pddl").write_text(json.dumps(document))
    report = check_games(broken)
    assert not report.ok and report.failures[0].game_id == games[0].game_id


def test_shipped_panel_is_balanced_and_disjoint_from_pool():
    panel = load_manifest(manifest_path(HELDOUT_MANIFEST))
    pool = load_manifest(manifest_path(POOL_MANIFEST))
    assert len(panel["games"]) == 128 and len(pool["games"]) >= 600
    counts = Counter(g["task_type"] for g in panel["games"])
    assert set(counts) == set(TASK_TYPES) and max(counts.values()) - min(counts.values()) <= 1
    assert not {g["game_id"] for g in panel["games"]} & {g["game_id"] for g in pool["games"]}

    def problem_bodies(manifest):
        wanted = {g["game_id"] for g in manifest["games"]}
        bodies = set()
        for spec in game_specs(manifest["split"], manifest["seed"], manifest["room"]):
            if spec.game_id in wanted:
                bodies.add(spec.sentence + spec.problem.split("\n", 1)[1])
                wanted.discard(spec.game_id)
            if not wanted:
                return bodies

    assert not problem_bodies(panel) & problem_bodies(pool)


def test_panel_materializes_verified_and_matches_fresh_generation(tmp_path):
    paths = panel_paths()
    assert len(paths) == 128 and list(paths) == sorted(paths)
    # The first games of `ccpo games generate --split heldout --seed 0` are the panel's.
    fresh = generate_games(tmp_path / "fresh", "heldout", 3, seed=0)
    manifest = load_manifest(manifest_path(HELDOUT_MANIFEST))
    assert [g.sha256 for g in fresh] == [g["sha256"] for g in manifest["games"][:3]]
    # A tampered cached game is detected and rebuilt from the manifest.
    victim = Path(paths[5])
    original = victim.read_bytes()
    victim.write_bytes(original.replace(b"walkthrough", b"walkthroughX", 1))
    rebuilt = materialize(manifest_path(HELDOUT_MANIFEST), games_cache())
    assert Path(rebuilt[5]).read_bytes() == original


def test_pool_manifest_regenerates(tmp_path):
    # The full pool takes seconds to write; its first and last games exercise the same path.
    manifest = json.loads(manifest_path(POOL_MANIFEST).read_text())
    manifest["games"] = manifest["games"][:3] + manifest["games"][-3:]
    small = tmp_path / "pool-manifest.json"
    small.write_text(json.dumps(manifest))
    paths = materialize(small, tmp_path / "cache")
    assert len(paths) == 6 and all("trial_train_s0" in p for p in paths)
    assert materialize(small, tmp_path / "cache") == paths  # cached and verified


def test_manifest_mismatch_is_invalid_input(tmp_path):
    manifest = json.loads(manifest_path(HELDOUT_MANIFEST).read_text())
    manifest["games"] = manifest["games"][:2]
    manifest["games"][1]["sha256"] = "0" * 64
    bad = tmp_path / "bad-manifest.json"
    bad.write_text(json.dumps(manifest))
    with pytest.raises(InvalidInput, match="different content"):
        materialize(bad, tmp_path / "cache")

"""Seeded, byte-for-byte deterministic ALFWorld games for all six task types.

A game is written in the engine's own layout, `<task folder>/<trial>/{game.tw-pddl,
traj_data.json}`: the PDDL problem is templated here, the domain and text grammar are the
installed engine's (the grammar with its `UNKNOWN GOAL` replaced by the task sentence), and
the walkthrough is Fast Downward's plan, replayed in the engine before the game is accepted
(it must win, and only on its last step; a game is never won at step 0).

Rooms (docs/alfworld-games.md, "Game sets"): by default small ones, a kitchen
(fridge, microwave, sinkbasin plus 1-3 open receptacles) or a bedroom (3-5 receptacles and a
lamp) with 1-3 distractor objects. `room="large"` adds closed containers (cabinets, drawers,
a safe), more receptacles and more objects.

Game `index` of (`split`, `seed`) has task type `TYPE_ORDER[index % 6]` and is drawn from its
own random generator, so the first N games of a larger run are exactly the games of `--n N`.

One concern, kept in one file past 400 lines: the six task types' room, object and goal
templates only make sense next to the PDDL writer and the replay check that accepts a game.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ccpo_cli.envs.engine import GameSession, engine_assets, validation_session
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.task_types import ROOMS, TASK_TYPES

GENERATOR_VERSION = 1
SPLITS = ("train", "heldout")
TYPE_ORDER = ("pick", "look", "clean", "heat", "cool", "pick2")
MAX_ATTEMPTS = 20

# Object types and what they allow (ALFWorld's affordances for these objects).
KITCHEN_OBJECTS: dict[str, frozenset[str]] = {
    "Apple": frozenset({"heat", "cool", "clean"}),
    "Potato": frozenset({"heat", "cool", "clean"}),
    "Tomato": frozenset({"heat", "cool", "clean"}),
    "Egg": frozenset({"heat", "cool", "clean"}),
    "Bread": frozenset({"heat", "cool"}),
    "Lettuce": frozenset({"cool", "clean"}),
    "Mug": frozenset({"heat", "cool", "clean"}),
    "Cup": frozenset({"heat", "cool", "clean"}),
    "Plate": frozenset({"heat", "cool", "clean"}),
    "Bowl": frozenset({"cool", "clean"}),
    "Pan": frozenset({"cool", "clean"}),
    "Pot": frozenset({"cool", "clean"}),
    "Fork": frozenset({"clean"}),
    "Spoon": frozenset({"clean"}),
    "Knife": frozenset({"clean"}),
    "ButterKnife": frozenset({"clean"}),
    "Spatula": frozenset({"clean"}),
    "Ladle": frozenset({"clean"}),
    "DishSponge": frozenset({"clean"}),
    "SaltShaker": frozenset(),
    "PepperShaker": frozenset(),
    "Kettle": frozenset({"clean"}),
}
KITCHEN_RECEPTACLES = (
    "CounterTop",
    "Cabinet",
    "Drawer",
    "DiningTable",
    "StoveBurner",
    "Shelf",
    "GarbageCan",
)
BEDROOM_OBJECTS = (
    "AlarmClock",
    "Book",
    "CD",
    "CellPhone",
    "CreditCard",
    "KeyChain",
    "Laptop",
    "Pen",
    "Pencil",
    "Pillow",
    "Watch",
    "Mug",
    "Bowl",
    "Statue",
    "Vase",
    "Box",
    "RemoteControl",
    "TissueBox",
    "BaseballBat",
    "TennisRacket",
)
BEDROOM_RECEPTACLES = (
    "Bed",
    "Desk",
    "Dresser",
    "SideTable",
    "Shelf",
    "Drawer",
    "ArmChair",
    "GarbageCan",
    "LaundryHamper",
    "Cabinet",
    "Safe",
    "Sofa",
)
LAMPS = ("DeskLamp", "FloorLamp")
OPENABLE = frozenset({"Fridge", "Microwave", "Cabinet", "Drawer", "Safe"})
APPLIANCES = ("Fridge", "Microwave", "SinkBasin")  # constants of the domain's actions

STATE_CHANGE = {"clean": "clean", "heat": "heat", "cool": "cool"}
SENTENCES = {
    "pick": ("put a {obj} in {recep}.", "put some {obj} on {recep}."),
    "look": ("look at {obj} under the {lamp}.", "examine the {obj} with the {lamp}."),
    "clean": ("put a clean {obj} in {recep}.", "clean some {obj} and put it in {recep}."),
    "heat": ("put a hot {obj} in {recep}.", "heat some {obj} and put it in {recep}."),
    "cool": ("put a cool {obj} in {recep}.", "cool some {obj} and put it in {recep}."),
    "pick2": ("put two {obj} in {recep}.", "find two {obj} and put them in {recep}."),
}


@dataclass(frozen=True)
class GameSpec:
    """One generated game before validation: where it goes and what it holds."""

    split: str
    seed: int
    index: int
    task_type: str  # short key
    object_type: str
    target_type: str  # goal receptacle type, or the lamp type for `look`
    sentence: str
    problem: str
    room: str

    @property
    def folder(self) -> str:
        long_name = TASK_TYPES[self.task_type]
        return f"{long_name}-{self.object_type}-None-{self.target_type}-{self.index:04d}"

    @property
    def trial(self) -> str:
        return f"trial_{self.split}_s{self.seed}"

    @property
    def game_id(self) -> str:
        return f"{self.folder}/{self.trial}"

    def traj_data(self) -> dict:
        look = self.task_type == "look"
        return {
            "ccpo": {
                "generator": GENERATOR_VERSION,
                "index": self.index,
                "room": self.room,
                "seed": self.seed,
                "split": self.split,
            },
            "pddl_params": {
                "mrecep_target": "",
                "object_sliced": False,
                "object_target": self.object_type,
                "parent_target": "" if look else self.target_type,
                "toggle_target": self.target_type if look else "",
            },
            "task_id": self.game_id,
            "task_type": TASK_TYPES[self.task_type],
        }


# ---- the PDDL problem ----------------------------------------------------------------------


def _receptacle_id(rtype: str, number: int) -> str:
    # The demangler shows a sink basin as "sinkbasin N" only for ids like Sink|N|SinkBasin.
    if rtype == "SinkBasin":
        return f"Sink_bar_{number}_bar_SinkBasin"
    return f"{rtype}_bar_{number}"


def _goal(task_type: str, obj: str, target: str) -> str:
    if task_type == "look":
        return (
            "(:goal (and"
            f" (exists (?t - object ?r - receptacle ?a - agent ?l - location)"
            f" (and (objectType ?t {target}Type) (toggleable ?t) (isToggled ?t)"
            " (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?t ?r)))"
            f" (exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o)))))"
        )
    if task_type == "pick2":
        return (
            "(:goal (exists (?r - receptacle ?o1 - object ?o2 - object)"
            f" (and (receptacleType ?r {target}Type) (not (= ?o1 ?o2))"
            f" (objectType ?o1 {obj}Type) (inReceptacle ?o1 ?r)"
            f" (objectType ?o2 {obj}Type) (inReceptacle ?o2 ?r))))"
        )
    state = {
        "clean": ["(cleanable ?o)", "(isClean ?o)"],
        "heat": ["(heatable ?o)", "(isHot ?o)"],
        "cool": ["(coolable ?o)", "(isCool ?o)"],
    }.get(task_type, [])
    conditions = " ".join(
        [
            f"(objectType ?o {obj}Type)",
            f"(receptacleType ?r {target}Type)",
            *state,
            "(inReceptacle ?o ?r)",
        ]
    )
    return f"(:goal (exists (?r - receptacle ?o - object) (and {conditions})))"


def _object_facts(oid: str, otype: str, rid: str, location: str, lamp_ids: set[str]) -> str:
    """An object's line of the problem's :init: where it is (`location` is its receptacle's),
    and what may be done with it: a lamp is toggled, anything else picked up (and cleaned,
    heated or cooled as its type allows)."""
    facts = [
        f"(objectType {oid} {otype}Type)",
        f"(inReceptacle {oid} {rid})",
        f"(objectAtLocation {oid} {location})",
    ]
    if oid in lamp_ids:
        facts.append(f"(toggleable {oid})")
    else:
        facts.append(f"(pickupable {oid})")
        affordances = KITCHEN_OBJECTS.get(otype, frozenset())
        facts += [
            f"({word}able {oid})" for word in ("clean", "heat", "cool") if word in affordances
        ]
    return "  " + " ".join(facts)


def _problem(
    name: str,
    receptacles: list[tuple[str, str]],
    objects: list[tuple[str, str, str]],
    lamp_ids: set[str],
    task_type: str,
    obj: str,
    target: str,
) -> str:
    """receptacles: (id, type); objects: (id, type, receptacle id)."""
    rtypes = sorted({rtype for _, rtype in receptacles} | set(APPLIANCES))
    otypes = sorted({otype for _, otype, _ in objects})
    location = {rid: f"loc_bar_{n + 1}" for n, (rid, _) in enumerate(receptacles)}
    lines = [f"(define (problem {name})", "(:domain alfred)", "(:objects", "  agent1 - agent"]
    lines.append("  " + " ".join(f"{t}Type" for t in otypes) + " - otype")
    lines.append("  " + " ".join(f"{t}Type" for t in rtypes) + " - rtype")
    lines.append("  " + " ".join(oid for oid, _, _ in objects) + " - object")
    lines.append("  " + " ".join(rid for rid, _ in receptacles) + " - receptacle")
    lines.append(
        "  loc_bar_0 " + " ".join(location[rid] for rid, _ in receptacles) + " - location)"
    )
    lines += ["(:init", "  (atLocation agent1 loc_bar_0)"]
    for rid, rtype in receptacles:
        facts = [
            f"(receptacleType {rid} {rtype}Type)",
            f"(receptacleAtLocation {rid} {location[rid]})",
        ]
        if rtype in OPENABLE:
            facts.append(f"(openable {rid})")
        lines.append("  " + " ".join(facts))
    lines += [
        _object_facts(oid, otype, rid, location[rid], lamp_ids) for oid, otype, rid in objects
    ]
    movable = sorted({otype for oid, otype, _ in objects if oid not in lamp_ids})
    contain = [f"(canContain {rtype}Type {otype}Type)" for rtype in rtypes for otype in movable]
    lines.append("  " + " ".join(contain) + ")")
    lines.append(_goal(task_type, obj, target))
    lines.append(")")
    return "\n".join(lines) + "\n"


# ---- sampling a room -----------------------------------------------------------------------


def _numbered(types: list[str], id_of: Callable[[str, int], str]) -> list[tuple[str, str]]:
    """(id, type) of each of `types`, numbered from 1 within its type, in order."""
    counts: dict[str, int] = {}
    numbered = []
    for kind in types:
        counts[kind] = counts.get(kind, 0) + 1
        numbered.append((id_of(kind, counts[kind]), kind))
    return numbered


def _kitchen_receptacles(rng: random.Random, large: bool) -> list[str]:
    if large:
        others = [rng.choice(KITCHEN_RECEPTACLES) for _ in range(rng.randint(3, 8))]
    else:
        # Small rooms keep every receptacle but fridge and microwave open.
        pool = [r for r in KITCHEN_RECEPTACLES if r not in OPENABLE]
        others = rng.sample(pool, rng.randint(1, 3))
    return ["Fridge", "Microwave", "SinkBasin", *others]


def _bedroom_receptacles(rng: random.Random, large: bool) -> list[str]:
    if large:
        return [rng.choice(BEDROOM_RECEPTACLES) for _ in range(rng.randint(5, 10))]
    pool = [r for r in BEDROOM_RECEPTACLES if r not in OPENABLE]
    return rng.sample(pool, rng.randint(3, 5))


def _goal_objects(
    rng: random.Random, task_type: str, bedroom: bool, rtypes: list[str]
) -> tuple[str, str] | None:
    """(the object to move, the receptacle or lamp of the goal); None when the room has no
    receptacle that may be a goal. A kitchen's object allows the task's state change."""
    goal_candidates = sorted({t for t in rtypes if t not in APPLIANCES})
    if task_type == "look":
        obj = rng.choice(BEDROOM_OBJECTS)
        return obj, rng.choice(LAMPS)
    if not goal_candidates:
        return None
    target = rng.choice(goal_candidates)
    if bedroom:
        return rng.choice(BEDROOM_OBJECTS), target
    wanted = STATE_CHANGE.get(task_type)
    choices = sorted(o for o, a in KITCHEN_OBJECTS.items() if wanted is None or wanted in a)
    return rng.choice(choices), target


def _sample(
    split: str, seed: int, index: int, task_type: str, room: str, attempt: int
) -> GameSpec | None:
    rng = random.Random(f"ccpo-games/v{GENERATOR_VERSION}/{split}/{seed}/{room}/{index}/{attempt}")
    large = room == "large"
    bedroom = task_type == "look" or (task_type in ("pick", "pick2") and rng.random() < 0.5)
    rtypes = _bedroom_receptacles(rng, large) if bedroom else _kitchen_receptacles(rng, large)
    rng.shuffle(rtypes)
    receptacles = _numbered(rtypes, _receptacle_id)
    goal = _goal_objects(rng, task_type, bedroom, rtypes)
    if goal is None:
        return None
    obj, target = goal
    # Targets start only in receptacles not of the goal type, so no game is won at step 0.
    sources = [rid for rid, rtype in receptacles if rtype != target]
    if not large:
        # Small rooms: targets are in plain sight (closed appliances only in the large ones).
        sources = [
            rid for rid, rtype in receptacles if rtype != target and rtype not in OPENABLE
        ] or sources
    if not sources:
        return None
    n_targets = 2 if task_type == "pick2" else 1
    if large and task_type != "pick2" and rng.random() < 0.3:
        n_targets = 2
    catalog = BEDROOM_OBJECTS if bedroom else tuple(sorted(KITCHEN_OBJECTS))
    distractor_types = [o for o in catalog if o != obj]
    n_distractors = rng.randint(2, 6) if large else rng.randint(1, 3)
    distractors = [rng.choice(distractor_types) for _ in range(n_distractors)]
    placed: list[tuple[str, str, str]] = []
    ids = _numbered([obj] * n_targets + distractors, lambda otype, n: f"{otype}_bar_{n}")
    for position, (oid, otype) in enumerate(ids):
        where = rng.choice(sources) if position < n_targets else rng.choice(receptacles)[0]
        placed.append((oid, otype, where))
    lamp_ids: set[str] = set()
    if task_type == "look":
        lamp_id = f"{target}_bar_1"
        lamp_ids.add(lamp_id)
        holders = [rid for rid, rtype in receptacles if rtype not in OPENABLE]
        placed.append((lamp_id, target, rng.choice(holders or [rid for rid, _ in receptacles])))
    template = rng.choice(SENTENCES[task_type])
    sentence = template.format(obj=obj.lower(), recep=target.lower(), lamp=target.lower())
    name = f"ccpo_{split}_s{seed}_{index:04d}"
    problem = _problem(name, receptacles, placed, lamp_ids, task_type, obj, target)
    return GameSpec(split, seed, index, task_type, obj, target, sentence, problem, room)


def game_specs(split: str, seed: int, room: str = "small") -> Iterator[GameSpec]:
    """The endless, deterministic sequence of candidate games of (split, seed, room); a
    candidate the sampler cannot build is redrawn (same index, next attempt)."""
    if split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if room not in ROOMS:
        raise UsageError(f"room must be one of {', '.join(ROOMS)}, got {room!r}")
    index = 0
    while True:
        task_type = TYPE_ORDER[index % len(TYPE_ORDER)]
        for attempt in range(MAX_ATTEMPTS):
            spec = _sample(split, seed, index, task_type, room, attempt)
            if spec is not None:
                yield spec
                break
        index += 1


# ---- files ---------------------------------------------------------------------------------


def game_document(spec: GameSpec, walkthrough: list[str] | None) -> dict:
    domain, grammar = engine_assets()
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", spec.sentence),
        "pddl_problem": spec.problem,
        "solvable": True,
        "walkthrough": walkthrough,
    }


def _dump(document: dict) -> bytes:
    return (json.dumps(document, indent=1, sort_keys=False) + "\n").encode("utf-8")


def game_files(spec: GameSpec, walkthrough: list[str] | None) -> dict[str, bytes]:
    """The exact bytes of the game's two files, by file name."""
    return {
        "game.tw-pddl": _dump(game_document(spec, walkthrough)),
        "traj_data.json": _dump(spec.traj_data()),
    }


def content_hash(files: dict[str, bytes]) -> str:
    """sha256 over the game's files (name, length, bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{len(files[name])}\0".encode())
        digest.update(files[name])
    return digest.hexdigest()


def write_game(root: Path, spec: GameSpec, walkthrough: list[str] | None) -> tuple[Path, str]:
    """Write the game under `root`; returns (its game.tw-pddl path, its content hash)."""
    files = game_files(spec, walkthrough)
    folder = root / spec.folder / spec.trial
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder / "game.tw-pddl", content_hash(files)


# ---- validation by the planner -------------------------------------------------------------


def plan_and_replay(game_path: str | Path) -> list[str]:
    """Fast Downward's plan for a game (or its stored walkthrough), replayed in the engine: the
    plan, or InvalidInput when the game is won at step 0, has no plan, or its plan does not win
    exactly at its end."""
    session = validation_session()
    session.load(game_path)
    first = session.reset()
    plan = list(first.info["walkthrough"])
    if first.info["won"]:
        raise InvalidInput(f"{game_path}: already won at step 0")
    if not plan:
        raise InvalidInput(f"{game_path}: no walkthrough and the planner found no plan")
    return replay(session, plan, game_path)


def replay(session: GameSession, plan: list[str], game_path: str | Path) -> list[str]:
    for number, command in enumerate(plan, start=1):
        result = session.step(command)
        if result.observation == "Nothing happens.":
            raise InvalidInput(
                f"{game_path}: walkthrough step {number} {command!r} is not admissible"
            )
        if result.info["won"] != (number == len(plan)):
            raise InvalidInput(f"{game_path}: walkthrough wins at step {number} of {len(plan)}")
    return plan


def _validate_spec(spec: GameSpec) -> list[str] | None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ccpo-game-") as scratch:
        path, _ = write_game(Path(scratch), spec, None)
        try:
            return plan_and_replay(path)
        except InvalidInput:
            return None


@dataclass(frozen=True)
class GeneratedGame:
    index: int
    game_id: str
    task_type: str
    path: str
    sha256: str
    walkthrough: tuple[str, ...]


def _output_folder(out: str | Path) -> Path:
    """The folder the games go to, created; InvalidInput for a file there or one not creatable."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise InvalidInput(
            f"--out {out}: exists and is not a folder; refusing to write games over it"
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InvalidInput(f"--out {out}: cannot create the folder ({error.strerror})") from None
    return root


def _distinct(specs: Iterator[GameSpec]) -> Iterator[GameSpec]:
    """The candidates whose sentence and problem (but its name) no earlier candidate had."""
    seen: set[str] = set()
    for spec in specs:
        key = hashlib.sha256((spec.sentence + spec.problem.split("\n", 1)[1]).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            yield spec


def generate_games(
    out: str | Path,
    split: str,
    n: int,
    seed: int = 0,
    room: str = "small",
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[GeneratedGame]:
    """Write `n` validated games of (split, seed, room) under `out`; returns them in index
    order. A candidate whose planner check fails, or that repeats an earlier problem, is
    skipped (deterministically), and the next index takes its place."""
    if n < 1:
        raise UsageError(f"--n must be at least 1, got {n}")
    root = _output_folder(out)
    specs = _distinct(game_specs(split, seed, room))
    accepted: list[GeneratedGame] = []
    chunk = max(8, 4 * max(1, workers))
    from ccpo_cli.envs import memo

    executor = (
        ProcessPoolExecutor(max_workers=workers, initializer=memo.install) if workers > 1 else None
    )
    was_installed = memo.installed()
    memo.install()
    try:
        while len(accepted) < n:
            batch = list(itertools.islice(specs, min(chunk, n - len(accepted))))
            plans = (
                list(executor.map(_validate_spec, batch))
                if executor
                else [_validate_spec(s) for s in batch]
            )
            for spec, plan in zip(batch, plans):
                if plan is None or len(accepted) >= n:
                    continue
                path, digest = write_game(root, spec, plan)
                accepted.append(
                    GeneratedGame(
                        spec.index, spec.game_id, spec.task_type, str(path), digest, tuple(plan)
                    )
                )
                if progress:
                    progress(len(accepted), n)
    finally:
        if executor:
            executor.shutdown()
        if not was_installed:
            memo.uninstall()
    return accepted

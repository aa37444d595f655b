"""Benchmark the ALFWorld batch environment on the shipped 128-game held-out panel.

Measured side by side in one run (ratios, not absolute targets, are what carries over):
1. the oracle over the full panel (`--workers` processes, memo on): wall time, start included;
2. the random agent over the full panel (same setting): env steps per second;
3. on an evenly spaced subset of `--compare-games` games, the random agent with one worker
   without and with the parse memo, and with `--workers` workers with the memo: the memo's
   speed-up and the parallel speed-up over one worker;
4. in this process, CPU milliseconds per load, reset and step without and with the memo
   (CPU time, so it holds on a busy machine where wall-clock ratios do not).

Steps per second count every env step of the episodes over the playing time (loads and
resets included, worker start excluded).

    PYTHONPATH=. python scripts/bench_eval.py --workers 2
    PYTHONPATH=. python scripts/bench_eval.py --workers 2 --compare-games 24 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("ALFWORLD_DATA", os.path.join(tempfile.gettempdir(), "ccpo-alfworld-data"))

from ccpo_cli.agents.oracle import OracleAgent  # noqa: E402
from ccpo_cli.agents.random_agent import RandomAgent  # noqa: E402
from ccpo_cli.envs import AlfworldBatchEnv, GameSession, heldout_panel, memo, play_episodes  # noqa: E402


def _run(games, agent, workers: int, memo: bool, max_steps: int, walkthrough: bool = False) -> dict:
    started = time.perf_counter()
    with AlfworldBatchEnv(
        games, workers=workers, memo=memo, max_steps=max_steps, walkthrough=walkthrough
    ) as env:
        ready = time.perf_counter()
        episodes = play_episodes(env, agent)
        finished = time.perf_counter()
    steps = sum(e.turns for e in episodes)
    return {
        "games": len(games),
        "workers": workers,
        "memo": memo,
        "wall_s": finished - started,
        "play_s": finished - ready,
        "steps": steps,
        "steps_per_s": steps / (finished - ready),
        "success": 100.0 * sum(e.won for e in episodes) / len(episodes),
    }


def _engine_cpu_ms(games, use_memo: bool, steps: int = 10) -> dict:
    """CPU ms per load, first reset, later reset and step of one in-process engine shell."""
    memo.set_memo(use_memo)
    try:
        session = GameSession(games[0])
        totals = {"load": 0.0, "reset": 0.0, "reset_again": 0.0, "step": 0.0}
        for path in games:
            started = time.process_time()
            session.load(path)
            loaded = time.process_time()
            first = session.reset()
            reset = time.process_time()
            commands = [c for c in first.info["admissible_commands"] if c != "help"]
            for number in range(steps):
                if session.step(commands[number % len(commands)]).done:
                    break
            stepped = time.process_time()
            session.reset()
            totals["load"] += loaded - started
            totals["reset"] += reset - loaded
            totals["step"] += (stepped - reset) / (number + 1)
            totals["reset_again"] += time.process_time() - stepped
        session.close()
        return {key: 1000 * value / len(games) for key, value in totals.items()}
    finally:
        memo.uninstall()


def _log(label: str, row: dict) -> None:
    print(
        f"{label:<38} games={row['games']:>3} workers={row['workers']} memo={row['memo']!s:<5} "
        f"wall={row['wall_s']:6.1f}s steps={row['steps']:>5} {row['steps_per_s']:6.1f} steps/s "
        f"success={row['success']:.1f}%",
        file=sys.stderr,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare-games", type=int, default=32, help="panel games for part 3")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args()

    panel = heldout_panel()
    step = max(1, len(panel) // args.compare_games)
    subset = panel[::step][: args.compare_games]
    results: dict[str, dict] = {}

    results["oracle_panel"] = _run(
        panel, OracleAgent(), args.workers, True, args.max_steps, walkthrough=True
    )
    _log("oracle, full panel", results["oracle_panel"])
    results["random_panel"] = _run(panel, RandomAgent(seed=0), args.workers, True, args.max_steps)
    _log("random, full panel", results["random_panel"])
    results["random_no_memo_1w"] = _run(subset, RandomAgent(seed=0), 1, False, args.max_steps)
    _log("random, subset, 1 worker, no memo", results["random_no_memo_1w"])
    results["random_memo_1w"] = _run(subset, RandomAgent(seed=0), 1, True, args.max_steps)
    _log("random, subset, 1 worker, memo", results["random_memo_1w"])
    results["random_memo_nw"] = _run(
        subset, RandomAgent(seed=0), args.workers, True, args.max_steps
    )
    _log(f"random, subset, {args.workers} workers, memo", results["random_memo_nw"])

    engine_games = subset[:12]
    results["engine_cpu_ms_no_memo"] = _engine_cpu_ms(engine_games, use_memo=False)
    results["engine_cpu_ms_memo"] = _engine_cpu_ms(engine_games, use_memo=True)
    for label in ("no_memo", "memo"):
        row = results[f"engine_cpu_ms_{label}"]
        print(
            f"engine CPU ms, {label:<8} load={row['load']:.1f} reset={row['reset']:.1f} "
            f"reset again={row['reset_again']:.1f} step={row['step']:.2f}",
            file=sys.stderr,
        )

    summary = {
        "oracle_panel_wall_s": results["oracle_panel"]["wall_s"],
        "oracle_panel_success": results["oracle_panel"]["success"],
        "memo_speedup": results["random_memo_1w"]["steps_per_s"]
        / results["random_no_memo_1w"]["steps_per_s"],
        "parallel_speedup": results["random_memo_nw"]["steps_per_s"]
        / results["random_memo_1w"]["steps_per_s"],
        "load_average_1min": os.getloadavg()[0],
        "step_cpu_speedup": results["engine_cpu_ms_no_memo"]["step"]
        / results["engine_cpu_ms_memo"]["step"],
        "cpu_count": os.cpu_count(),
    }
    print(
        f"oracle over {len(panel)} games: {summary['oracle_panel_wall_s']:.1f} s "
        f"({summary['oracle_panel_success']:.0f}% won); memo speed-up {summary['memo_speedup']:.2f}x; "
        f"{args.workers} workers over 1: {summary['parallel_speedup']:.2f}x; "
        f"step CPU time {summary['step_cpu_speedup']:.1f}x lower with the memo "
        f"(load average {summary['load_average_1min']:.1f} on {os.cpu_count()} cores)",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

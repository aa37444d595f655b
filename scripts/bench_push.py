"""Benchmark the training overhead of `--push-to-hub` on the local backend (target < 3 %),
side by side against plain training, in one process, alternating the two so drift hits both.

    python scripts/bench_push.py [--steps 20] [--eval-every 5] [--pairs 2] [--tasks 4] [--group 4]

Each pair trains the same arm and seed twice: plain, and pushing to the loopback fake Hub of
tests/fakehub.py (real huggingface_hub client, real uploader process). Rollouts run in the
trainer's process (--workers 0), so its CPU time is all of training. Printed per run and as
ratios of the medians:
  - trainer CPU: CPU seconds of the trainer's process (what --push-to-hub adds to training
    itself: the outbox rows, the progress line), robust to other load on the machine;
  - train clock: the trainer's own training time (rollouts and updates, evaluations excluded),
    which also shows the uploader competing for the same cores;
  - wall: the whole call, evaluations and the bounded wait for uploads at the end included.
The uploader's own CPU seconds are printed beside each push run, and so is the time the
trainer spent inside the publisher's calls during training (enqueueing, the progress line): on a
shared machine the side-by-side ratios carry the machine's noise, this one does not.
Everything is written to a temporary folder; nothing is left behind.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from fakehub import FakeHub  # noqa: E402

from ccpo_cli.backends.local import train_arm  # noqa: E402
from ccpo_cli.publishing.background import publisher_for  # noqa: E402
from ccpo_cli.vocabulary import LOCAL  # noqa: E402

TOKEN = "hf_bench_token"
TARGET = 0.03


class TimedObserver:
    """The publisher, with the seconds the trainer spends in its calls during training counted
    (`finished`, the bounded wait at the end, is counted apart)."""

    def __init__(self, inner):
        self.inner = inner
        self.during_s = 0.0
        self.end_s = 0.0

    def _timed(self, call, *args):
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.during_s += time.perf_counter() - started

    def started(self, run, run_dir):
        return self._timed(self.inner.started, run, run_dir)

    def evaluated(self, step):
        return self._timed(self.inner.evaluated, step)

    def progress(self):
        return self._timed(self.inner.progress)

    def finished(self, status, last_step, checkpoint):
        started = time.perf_counter()
        try:
            return self.inner.finished(status, last_step, checkpoint)
        finally:
            self.end_s += time.perf_counter() - started


def one_run(folder: Path, options: dict, hub: FakeHub | None) -> dict:
    db_path = folder / "runs.db"
    observer = None
    if hub is not None:
        observer = TimedObserver(
            publisher_for(
                db_path,
                "bench/push",
                backend=LOCAL,
                endpoint=hub.endpoint,
                token=TOKEN,
                window_start=0,
            )
        )

    def cpu(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    started, cpu_self, cpu_children = (
        time.perf_counter(),
        cpu(resource.RUSAGE_SELF),
        cpu(resource.RUSAGE_CHILDREN),
    )
    result = train_arm("return-hard", "bench", db_path, seed=0, observer=observer, **options)
    return {
        "train_s": result.train_wall_s,
        "wall_s": time.perf_counter() - started,
        "cpu_s": cpu(resource.RUSAGE_SELF) - cpu_self,
        "uploader_cpu_s": cpu(resource.RUSAGE_CHILDREN) - cpu_children,
        "in_trainer_s": observer.during_s if observer else 0.0,
        "end_wait_s": observer.end_s if observer else 0.0,
        "commits": len(hub.commits_by_ccpo("bench/push")) if hub is not None else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--eval-games", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    options = dict(
        steps=args.steps,
        eval_every=args.eval_every,
        tasks=args.tasks,
        group=args.group,
        eval_games=args.eval_games,
        max_steps=20,
        eval_max_steps=20,
        workers=args.workers,
    )
    plain, pushed = [], []
    with (
        tempfile.TemporaryDirectory(prefix="ccpo-bench-push-") as root,
        FakeHub(token=TOKEN) as hub,
    ):
        os.environ["HF_HOME"] = str(Path(root) / "hf-home")
        os.environ["HF_ENDPOINT"] = hub.endpoint
        for pair in range(args.pairs):
            for kind, sink in (
                (("plain", plain), ("push", pushed))
                if pair % 2 == 0
                else (("push", pushed), ("plain", plain))
            ):
                folder = Path(root) / f"{kind}-{pair}"
                folder.mkdir()
                measured = one_run(folder, options, hub if kind == "push" else None)
                sink.append(measured)
                print(
                    f"pair {pair} {kind:5s}: trainer CPU {measured['cpu_s']:7.2f} s, train clock "
                    f"{measured['train_s']:7.2f} s, wall {measured['wall_s']:7.2f} s"
                    + (
                        f", {measured['commits']} commit(s) sent, uploader CPU {measured['uploader_cpu_s']:.2f} s, "
                        f"in the trainer {measured['in_trainer_s']:.3f} s, end wait {measured['end_wait_s']:.2f} s"
                        if kind == "push"
                        else ""
                    ),
                    flush=True,
                )
            hub.repos.clear()
            hub.requests.clear()

    def ratio(key: str) -> float:
        return statistics.median(r[key] for r in pushed) / statistics.median(r[key] for r in plain)

    cpu_ratio, train_ratio, wall_ratio = ratio("cpu_s"), ratio("train_s"), ratio("wall_s")
    share = statistics.median(r["in_trainer_s"] / r["train_s"] for r in pushed)
    print(
        f"time in the publisher's calls during training: {100 * share:.2f} % of the train clock (median)"
    )
    print(
        f"push/plain trainer CPU ratio {cpu_ratio:.3f} (overhead {100 * (cpu_ratio - 1):+.1f} %, "
        f"target < {100 * TARGET:.0f} %: {'met' if cpu_ratio - 1 < TARGET else 'NOT met'})"
    )
    print(
        f"push/plain train clock ratio {train_ratio:.3f} (overhead {100 * (train_ratio - 1):+.1f} %; "
        "includes the uploader competing for the cores)"
    )
    print(f"push/plain wall ratio        {wall_ratio:.3f} (evaluations and the end wait included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

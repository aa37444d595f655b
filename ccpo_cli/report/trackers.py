"""A run's curves for the trackers researchers already watch: TensorBoard, trackio, wandb, CSV.

Two sources, one set of writers:

- while training (`ccpo train --report-to tensorboard,trackio,wandb`), `ReportingObserver` follows
  the run's `metrics.jsonl` (one line per step from the untrained evaluation at step 0 on, the
  held-out keys on evaluation steps; a verl file logger's `{"step", "data"}` lines too) and
  writes every numeric key as it appears. The trainer
  only sees a `TrainingObserver`, so it never waits on a tracker, and a tracker that fails is
  logged, never the trainer's failure;
- for any recorded run, an ingested one included (`ccpo export --to ...`), report/tracker_export.py
  reads its standing held-out evaluations and every scalar it logged from runs.db and writes
  them through the same sinks.

wandb runs are written offline (`WANDB_MODE=offline` unless the user set WANDB_MODE), in a
folder `wandb sync` uploads later: ccpo never waits on wandb's servers.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from ccpo_cli.errors import UsageError
from ccpo_cli.extras import check_extra, require_extra

# The one list of trackers: `ccpo export --to` takes TRACKERS, `ccpo train --report-to` the
# LIVE_TRACKERS (metrics.jsonl already is the run's CSV-like log).
TRACKERS = ("tensorboard", "trackio", "wandb", "csv")
LIVE_TRACKERS = ("tensorboard", "trackio", "wandb")
DEFAULT_TRACKIO_PROJECT = "ccpo"
# The optional extra (pyproject.toml) and module of each tracker that needs one.
TRACKER_EXTRAS = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}


def parse_trackers(text: str, allowed: tuple[str, ...] = LIVE_TRACKERS) -> tuple[str, ...]:
    """`tensorboard,trackio` -> ("tensorboard", "trackio"); `none` -> (). UsageError otherwise."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return ()
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise UsageError(
            f"--report-to {text!r}: use one or more of {', '.join(allowed)} (comma-separated) or none"
        )
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class ScalarPoint:
    step: int
    values: Mapping[str, float]
    wall_time: float | None = None


class ScalarSink(Protocol):
    def write(self, point: ScalarPoint) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Event files in `logdir`, written with TensorBoard's own record writer (no torch, no
    TensorFlow). Written in the caller's thread, not by EventFileWriter's background thread: a
    write that fails (a full disk) is raised here, where ccpo turns it into one line, instead
    of a thread's traceback on stderr."""

    def __init__(self, logdir: Path) -> None:
        require_extra("tensorboard", "tensorboard", what="writing TensorBoard event files")
        import socket
        import time

        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self._event, self._summary = Event, Summary
        # The file name TensorBoard's EventFileWriter gives (its readers look for it).
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.0"
        self._file = open(logdir / name, "wb")  # noqa: SIM115  (closed by close())
        self._writer = RecordWriter(self._file)
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def write(self, point: ScalarPoint) -> None:
        values = [
            self._summary.Value(tag=tag, simple_value=value) for tag, value in point.values.items()
        ]
        wall_time = point.wall_time if point.wall_time is not None else datetime.now().timestamp()
        self._write(
            self._event(wall_time=wall_time, step=point.step, summary=self._summary(value=values))
        )
        self._file.flush()  # a reader (tensorboard --logdir) sees each step as it comes

    def close(self) -> None:
        if not self._file.closed:
            try:
                self._file.flush()
            finally:
                self._file.close()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    # trackio prints where its project went on stdout, which is for `--json`'s one document.
    with contextlib.redirect_stdout(sys.stderr):
        yield


class _TrackerRunSink:
    """A sink over a tracker's run (`_run`: a wandb run, or the trackio module, which logs to
    its current run): each step is one `log`, the end one `finish`, their printing on stderr."""

    _run: Any

    def write(self, point: ScalarPoint) -> None:
        with _stdout_to_stderr():
            self._run.log(dict(point.values), step=point.step)

    def close(self) -> None:
        with _stdout_to_stderr():
            self._run.finish()


class TrackioSink(_TrackerRunSink):
    """One trackio run (`name`) in `project`, stored where trackio stores it (TRACKIO_DIR)."""

    def __init__(
        self, project: str, name: str, config: Mapping[str, Any] | None = None, *, replace: bool
    ) -> None:
        trackio = require_extra("trackio", "trackio", what="a trackio run")
        from trackio.sqlite_storage import SQLiteStorage

        self._run = trackio
        with _stdout_to_stderr():
            if replace and name in SQLiteStorage.get_runs(project):
                SQLiteStorage.delete_run(project, name)
            trackio.init(
                project=project,
                name=name,
                config=dict(config or {}),
                resume="allow",
                embed=False,
                auto_log_cpu=False,
                auto_log_gpu=False,
            )


def wandb_mode() -> str:
    """offline, unless the user chose a mode with WANDB_MODE."""
    return os.environ.get("WANDB_MODE") or "offline"


class WandbSink(_TrackerRunSink):
    """One wandb run (`name`, id `run_id`) of `project`, written under `directory`/wandb by
    wandb's own writer, offline unless WANDB_MODE says otherwise: `wandb sync` uploads it."""

    def __init__(
        self,
        project: str,
        name: str,
        directory: Path,
        config: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        wandb = require_extra("wandb", "wandb", what="a wandb run")
        directory.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            console="off",  # the trainer's output is the user's terminal's, not wandb's
            x_disable_stats=True,
            x_disable_meta=True,
            disable_git=True,
            save_code=False,
            silent=True,
        )
        with _stdout_to_stderr():
            self._run = wandb.init(
                project=project,
                name=name,
                id=run_id,
                dir=str(directory),
                mode=wandb_mode(),
                config=dict(config or {}),
                settings=settings,
                reinit="create_new",
            )

    @property
    def folder(self) -> Path:
        """The run's own folder (`offline-run-...`), the one `wandb sync` takes."""
        return Path(self._run.dir).parent


class CsvSink:
    """One CSV file at `path`: `step`, `wall_time`, then one column per key (sorted); written
    on close."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._points: list[ScalarPoint] = []

    def write(self, point: ScalarPoint) -> None:
        self._points.append(point)

    def close(self) -> None:
        keys = sorted({key for point in self._points for key in point.values})
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["step", "wall_time", *keys])
        for point in self._points:
            writer.writerow(
                [
                    point.step,
                    "" if point.wall_time is None else repr(point.wall_time),
                    *(repr(point.values[key]) if key in point.values else "" for key in keys),
                ]
            )
        # Written in place: ccpo export hands a fresh partial path and puts it where it belongs.
        self._path.write_text(buffer.getvalue(), encoding="utf-8")


# ----------------------------------------------------------------------------- while training


def check_installed(trackers: tuple[str, ...]) -> None:
    """CcpoError (exit 1, a missing optional runtime) naming the extra to install, before training."""
    for tracker in trackers:
        if tracker in TRACKER_EXTRAS:
            check_extra(TRACKER_EXTRAS[tracker], tracker, what=f"--report-to {tracker}")


def numeric_scalars(record: Mapping[str, Any]) -> ScalarPoint | None:
    """A metrics.jsonl line (ccpo's flat object or verl's `{"step", "data"}`) as a point of its
    finite numbers; None for a line without an integer step."""
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    nested = record.get("data")
    data = nested if isinstance(nested, Mapping) else record
    values = {
        key: float(value)
        for key, value in data.items()
        if key not in ("step", "wall_time")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    }
    wall_time = record.get("wall_time")
    return ScalarPoint(
        step, values, float(wall_time) if isinstance(wall_time, (int, float)) else None
    )


class ReportingObserver:
    """A `TrainingObserver` that writes the run's metrics.jsonl to trackers as it grows, around
    another observer (the Hub publisher) that it forwards every call to."""

    def __init__(
        self,
        trackers: tuple[str, ...],
        *,
        project: str = DEFAULT_TRACKIO_PROJECT,
        inner: Any = None,
        log: Any = None,
    ) -> None:
        self.trackers, self.project, self.inner, self.log = trackers, project, inner, log
        check_installed(trackers)  # before training, not as a logged failure at its first step
        self._sinks: list[Any] = []
        self._path: Path | None = None
        self._offset = 0

    def started(self, run: str, run_dir: Path) -> None:
        self._close()
        self._path, self._offset = Path(run_dir) / "metrics.jsonl", 0
        for tracker in self.trackers:
            if tracker == "tensorboard":
                self._sinks.append(TensorBoardSink(Path(run_dir) / "tensorboard"))
            elif tracker == "trackio":
                self._sinks.append(TrackioSink(self.project, run, {"run": run}, replace=False))
            elif tracker == "wandb":
                self._sinks.append(WandbSink(self.project, run, Path(run_dir), {"run": run}))
        if self.log is not None:
            where = {
                "tensorboard": f"tensorboard --logdir {Path(run_dir) / 'tensorboard'}",
                "trackio": f"trackio show --project {self.project}",
                "wandb": f"wandb sync {Path(run_dir) / 'wandb'}/offline-run-*"
                if wandb_mode() == "offline"
                else f"wandb project {self.project}",
            }
            self.log("curves: " + "; ".join(where[tracker] for tracker in self.trackers))
        if self.inner is not None:
            self.inner.started(run, run_dir)

    def _follow(self) -> None:
        if self._path is None or not self._sinks or not self._path.exists():
            return
        with open(self._path, "rb") as handle:
            handle.seek(self._offset)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # a line still being written: read it next time
                self._offset += len(line)
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                point = numeric_scalars(record) if isinstance(record, dict) else None
                if point is not None:
                    for sink in self._sinks:
                        sink.write(point)

    def evaluated(self, step: int) -> None:
        self._follow()
        if self.inner is not None:
            self.inner.evaluated(step)

    def progress(self) -> str | None:
        self._follow()
        return None if self.inner is None else self.inner.progress()

    def finished(self, status: str, last_step: int, checkpoint: Path | None) -> None:
        try:
            self._follow()
            self._close()
        finally:
            if self.inner is not None:
                self.inner.finished(status, last_step, checkpoint)

    def _close(self) -> None:
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close()


__all__ = [
    "DEFAULT_TRACKIO_PROJECT",
    "LIVE_TRACKERS",
    "TRACKERS",
    "TRACKER_EXTRAS",
    "CsvSink",
    "ReportingObserver",
    "ScalarPoint",
    "ScalarSink",
    "TensorBoardSink",
    "TrackioSink",
    "WandbSink",
    "check_installed",
    "numeric_scalars",
    "parse_trackers",
]

"""A matrix's seed blocks as Ray core tasks (`ccpo matrix --ray-address ADDRESS|local`).

Ray is reached only through `connect`, and only with an address: `ray.init()` without one
silently attaches to whatever cluster RAY_ADDRESS or /tmp/ray/ray_current_cluster names, so
ccpo always passes one (`local` starts a fresh Ray instance that listens on loopback only).

Each block is one task asking for as many CPUs as the run has rollout workers (Ray sets the
task's OMP_NUM_THREADS to that number; the trainer uses one torch thread of its own). A task
trains its block into a database of its own on its node, `RUN_ROOT/_blocks/PREFIX-seedN-ID.db`,
first seeded with the driver's rows of those runs (so a run stopped half-way resumes from its
checkpoint), and returns every row of the block's runs, checkpoint rows included (they name
files on that node). Only the driver writes the matrix's runs.db, merging what a task returns with the store's rules (store/sync_merge.py): the rows are
content-keyed and the runs are matched by the global ids the driver created, so a task that ran
twice (Ray retries a task whose worker died) changes nothing. The block's database stays on
the node, so a retry there returns what the first attempt recorded.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli import vocabulary
from ccpo_cli.errors import CcpoError, RemoteError, UsageError
from ccpo_cli.experiments.blocks import Block, BlockDone, train_block
from ccpo_cli.extras import require_extra
from ccpo_cli.store.sync_export import Chunk

LOCAL = vocabulary.LOCAL  # `--ray-address local`: a Ray started in this process
# Read by Ray when it is imported: off, a Ray instance started here listens on 127.0.0.1 only.
_LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# A task whose worker died is run again this many times (its block then changes nothing twice).
TASK_RETRIES = 2
# The longest ccpo waits for a cluster address to accept a connection.
CONNECT_TIMEOUT_S = 10.0


def connect(address: str):
    """Ray connected to `address` (a cluster's HOST:PORT or ray:// URL, or `local`), never to a
    cluster the environment happens to name. Returns the `ray` module."""
    if not address or not address.strip():
        raise UsageError("--ray-address: give a cluster address (HOST:PORT) or 'local'")
    address = address.strip()
    if address == "auto":
        raise UsageError(
            "--ray-address auto would attach to whatever cluster this machine names; give the "
            "address, or 'local'"
        )
    if address == LOCAL and "ray" not in sys.modules:
        os.environ.setdefault(_LOOPBACK_ONLY_ENV, "0")
    if address != LOCAL:
        _reachable(address)
    ray = require_extra("verl", "ray", what="--ray-address")
    if ray.is_initialized():
        raise UsageError(
            "Ray is already connected in this process; ccpo matrix makes its own connection"
        )
    import logging

    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except Exception as error:  # noqa: BLE001 - Ray's start-up failures have no common class
        # A runtime agent or raylet killed while Ray starts ends in Ray's own exceptions
        # (RaySystemError, RayError, a bare Exception from its node code): one ccpo line.
        raise RemoteError(
            f"--ray-address {address}: Ray did not start or connect ({type(error).__name__}: "
            f"{' '.join(str(error).split())[:300]}); nothing was trained"
        ) from None
    return ray


def _reachable(address: str) -> None:
    """A cluster address that nothing answers on fails within CONNECT_TIMEOUT_S, before Ray is
    asked (ray.init waits on an address that refuses or drops connections for minutes)."""
    import socket

    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray-address {address}: expected HOST:PORT, ray://HOST:PORT or 'local'")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise RemoteError(
            f"--ray-address {address}: nothing answers there within {CONNECT_TIMEOUT_S:.0f} s "
            f"({error.strerror or type(error).__name__}); is the cluster up?"
        ) from None


@dataclass(frozen=True)
class BlockReturn:
    """What a task sends back: every row of its block's runs, and where it ran."""

    seed: int
    chunks: list[Chunk]
    node: str
    run_cpu_s: dict[str, float] | None = None


def block_database(block: Block, first_uid: str) -> Path:
    """The block's own database on the node that trains it (one per block of one matrix)."""
    return Path(block.run_root) / "_blocks" / f"{block.prefix}-seed{block.seed}-{first_uid[:12]}.db"


def run_block_task(block: Block, driver_rows: list[Chunk], database: str) -> BlockReturn:
    """The Ray task: train `block` into `database` on this node and return its rows."""
    from ccpo_cli.store import open_db
    from ccpo_cli.store.records import run_id
    from ccpo_cli.store.sync_export import export_chunks
    from ccpo_cli.store.sync_merge import merge_chunks

    Path(database).parent.mkdir(parents=True, exist_ok=True)
    db = open_db(database)
    merge_chunks(db, driver_rows, where=f"the driver's rows of seed {block.seed}")
    spent = train_block(block, database)
    ids = [run_id(db, run.name) for run in block.runs()]
    return BlockReturn(
        block.seed, list(export_chunks(db, ids, checkpoints=True)), _node_label(), spent
    )


def _node_label() -> str:
    try:
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except ImportError:
        node = None
    return f"{socket.gethostname()}/{node[:8]}" if node else socket.gethostname()


class RayBlocks:
    """Blocks as Ray tasks, as many at once as the cluster has slots of `cpus_per_block` CPUs."""

    counts_nodes = True

    def __init__(self, address: str, db_path: str | Path, *, cpus_per_block: int):
        self.ray = connect(address)
        self.db_path = db_path
        cpus = float(self.ray.cluster_resources().get("CPU", 0))
        self.capacity = max(1, int(cpus // cpus_per_block))
        self._task = self.ray.remote(num_cpus=cpus_per_block, max_retries=TASK_RETRIES)(
            run_block_task
        )
        self._in_flight: dict[Any, Block] = {}

    def submit(self, block: Block) -> None:
        from ccpo_cli.store import ensure_run, open_db
        from ccpo_cli.store.sync_export import export_chunks

        db = open_db(self.db_path)
        # The driver creates the runs, so every attempt of the task trains the same global ids.
        ids = [ensure_run(db, run.name) for run in block.runs()]
        uid = db["runs"].get(ids[0])["uid"]
        rows = list(export_chunks(db, ids))
        self._in_flight[self._task.remote(block, rows, str(block_database(block, uid)))] = block

    def wait_one(self, on_run: Callable[[int], None]) -> BlockDone:
        from ccpo_cli.store import open_db
        from ccpo_cli.store.sync_merge import merge_chunks

        (ready,), _ = self.ray.wait(list(self._in_flight), num_returns=1)
        block = self._in_flight.pop(ready)
        try:
            returned: BlockReturn = self.ray.get(ready)
        except self.ray.exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, CcpoError):
                raise cause from None
            raise CcpoError(
                f"the block of seed {block.seed} failed on the cluster: "
                f"{type(cause or error).__name__}: {' '.join(str(cause or error).split())[:300]}"
            ) from None
        except self.ray.exceptions.RayError as error:
            raise CcpoError(
                f"the block of seed {block.seed} was lost on the cluster ({type(error).__name__}); "
                "run the matrix again to go on from its checkpoints"
            ) from None
        merge_chunks(
            open_db(self.db_path),
            returned.chunks,
            where=f"seed {block.seed}'s block from {returned.node}",
        )
        return BlockDone(block, returned.node, returned.run_cpu_s)

    def abandon(self) -> list[Block]:
        stopped = list(self._in_flight.values())
        for reference in self._in_flight:
            self.ray.cancel(reference, force=True)
        self._in_flight = {}
        return stopped

    def close(self) -> None:
        if self._in_flight:
            self.abandon()
        self.ray.shutdown()

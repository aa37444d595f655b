"""Training backends: `local` (CPU policy on the real ALFWorld engine) and `verl` (verl-agent on GPUs).

Each takes one typed request (`local.request.LocalTrainRequest`, `verl.request.VerlTrainRequest`).
"""


def seed_run_name(run: str | None, seed: int, several: bool) -> str | None:
    """The run name of one seed: `--run NAME` as given, or NAME-seedN when several seeds share it."""
    from ccpo_cli.names import check_run_name

    if run is None:
        return None
    return check_run_name(f"{run}-seed{seed}" if several else run)


def run_header(name: str, arm: str, seed: int | None, place: str) -> str:
    """The line that opens a run in a log of several (multi-seed train, matrix blocks)."""
    return f"── run {name}: {arm}, seed {seed} ({place}) ──"

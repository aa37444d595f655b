"""`ccpo estimate`: advantages of one rollout batch under one arm."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli.common import ArmOption, SetOption, emit_json, handle_errors, info


@handle_errors
def estimate_command(
    ctx: typer.Context,
    arm_name: ArmOption,
    input_path: Annotated[
        Path, typer.Option("--input", metavar="FILE", help="Batch file, .json or .npz.")
    ],
    assignments: SetOption = None,
    output_path: Annotated[
        Path | None,
        typer.Option(
            "--output", metavar="FILE", help="Write .json or .npz here instead of stdout."
        ),
    ] = None,
) -> None:
    """Advantages for one rollout batch: n x L tensor plus per-row terms, rows in input order.

    Example: ccpo estimate --arm return-hard --input examples/worked-example-1.json
    """
    # Imported here: numpy and the estimators are for this command only.
    from ccpo_cli.arms import load_arm, parse_set_options
    from ccpo_cli.batch_io import load_batch, result_document, write_result
    from ccpo_cli.estimators import compute_advantages
    from ccpo_cli.estimators.compute import require_finite

    arm = load_arm(arm_name, parse_set_options(assignments))
    batch = load_batch(input_path)
    result = require_finite(compute_advantages(batch, arm), str(input_path))
    if output_path is None:
        emit_json(result_document(result))
        return
    write_result(result, output_path)
    live = int(result.live.sum())
    info(
        ctx,
        f"{arm.name} ({arm.fingerprint[:12]}): {batch.n_rows} rows, {live} live -> {output_path}",
    )

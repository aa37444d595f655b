"""`ccpo arms list` and `ccpo arms show ARM`: the arms, their resolved flags and what is inert."""

from __future__ import annotations

from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    FormatOption,
    JsonOption,
    SetOption,
    emit,
    handle_errors,
    output_format,
)

arms_app = typer.Typer(
    help="The estimator arms: every flag resolved, fingerprinted, inert flags explained.",
    no_args_is_help=True,
)


@arms_app.command("list")
@handle_errors
def list_command(as_json: JsonOption = False, fmt: FormatOption = None) -> None:
    """The known arms.

    Example: ccpo arms list --format markdown
    """
    from ccpo_cli.arms import list_arms, load_arm
    from ccpo_cli.report.command_tables import arms_list_table

    arms = [load_arm(name) for name in list_arms()]
    rows = [
        {
            "arm": arm.name,
            "estimator": arm.estimator,
            "description": arm.description,
            "fingerprint": arm.fingerprint,
        }
        for arm in arms
    ]
    emit(output_format(fmt, as_json), {"arms": rows}, lambda: [arms_list_table(rows)])


def _display(value: object) -> str:
    return '""' if value == "" else str(value)


@arms_app.command("show")
@handle_errors
def show_command(
    arm_name: Annotated[
        str,
        typer.Argument(
            metavar="ARM",
            help="Arm name (see `ccpo arms list`).",
            autocompletion=completion.arm_names,
        ),
    ],
    assignments: SetOption = None,
    as_json: JsonOption = False,
    fmt: FormatOption = None,
) -> None:
    """Every resolved flag, the fingerprint, and which flags are inert in this arm and why.

    Example: ccpo arms show return-hard --set edge_w=0
    """
    from ccpo_cli.arms import inert_flags, load_arm, parse_set_options
    from ccpo_cli.report.command_tables import arm_flags_table

    arm = load_arm(arm_name, parse_set_options(assignments))
    inert = inert_flags(arm)
    flags = arm.flags()
    # Each flag also sits at the top level, so `jq .gate` works as well as `jq .flags.gate`.
    document = {
        "arm": arm.name,
        "description": arm.description,
        "fingerprint": arm.fingerprint,
        "overrides": dict(arm.overrides),
        "flags": flags,
        "inert": inert,
        **flags,
    }

    def tables() -> list:
        lines = [f"{arm.name}: {arm.description}", f"fingerprint {arm.fingerprint}"]
        if arm.overrides:
            lines.append("overrides " + ", ".join(f"{k}={_display(v)}" for k, v in arm.overrides))
        return [*lines, arm_flags_table(flags, inert)]

    emit(output_format(fmt, as_json), document, tables)


@arms_app.command("diff")
@handle_errors
def diff_command(
    first: Annotated[
        str, typer.Argument(metavar="ARM", help="First arm.", autocompletion=completion.arm_names)
    ],
    second: Annotated[
        str, typer.Argument(metavar="ARM", help="Second arm.", autocompletion=completion.arm_names)
    ],
    as_json: JsonOption = False,
    fmt: FormatOption = None,
) -> None:
    """Exactly which resolved flags differ between two arms, and which of them are inert.

    Example: ccpo arms diff grpo gigpo
    """
    from ccpo_cli.arms import inert_flags, load_arm
    from ccpo_cli.report.command_tables import differences_table
    from ccpo_cli.report.diffs import arm_differences

    arms = [load_arm(name) for name in (first, second)]
    differences = arm_differences(
        arms[0].flags(), arms[1].flags(), inert_flags(arms[0]), inert_flags(arms[1])
    )
    document = {
        "first": first,
        "second": second,
        "fingerprints": [arm.fingerprint for arm in arms],
        "differences": [
            {"flag": d.field, "first": d.first, "second": d.second, "note": d.note}
            for d in differences
        ],
    }
    emit(
        output_format(fmt, as_json),
        document,
        lambda: (
            [differences_table(differences, first, second, "arms")]
            if differences
            else [
                f"arms {first} and {second} resolve to the same flags (fingerprint {arms[0].fingerprint[:12]})"
            ]
        ),
    )

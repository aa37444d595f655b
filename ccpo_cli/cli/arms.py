"""`ccpo arms list` and `ccpo arms show ARM`: the arms, their resolved flags and what is inert."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ccpo_cli.arms import inert_flags, list_arms, load_arm, parse_set_options
from ccpo_cli.cli.common import JsonOption, SetOption, emit_json, handle_errors, stdout_console

arms_app = typer.Typer(help="The estimator arms: every flag resolved, fingerprinted, inert flags explained.", no_args_is_help=True)


@arms_app.command("list")
@handle_errors
def list_command(as_json: JsonOption = False) -> None:
    """The known arms."""
    arms = [load_arm(name) for name in list_arms()]
    if as_json:
        emit_json(
            {
                "arms": [
                    {"arm": arm.name, "estimator": arm.estimator, "description": arm.description, "fingerprint": arm.fingerprint}
                    for arm in arms
                ]
            }
        )
        return
    table = Table("arm", "estimator", "fingerprint", "description")
    for arm in arms:
        table.add_row(arm.name, arm.estimator, arm.fingerprint[:12], arm.description)
    stdout_console.print(table)


def _display(value: object) -> str:
    return '""' if value == "" else str(value)


@arms_app.command("show")
@handle_errors
def show_command(
    arm_name: Annotated[str, typer.Argument(metavar="ARM", help="Arm name (see `ccpo arms list`).")],
    assignments: SetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every resolved flag, the fingerprint, and which flags are inert in this arm and why."""
    arm = load_arm(arm_name, parse_set_options(assignments))
    inert = inert_flags(arm)
    if as_json:
        flags = arm.flags()
        # Each flag also sits at the top level, so `jq .gate` works as well as `jq .flags.gate`.
        emit_json(
            {
                "arm": arm.name,
                "description": arm.description,
                "fingerprint": arm.fingerprint,
                "overrides": dict(arm.overrides),
                "flags": flags,
                "inert": inert,
                **flags,
            }
        )
        return
    stdout_console.print(f"{arm.name}: {arm.description}", markup=False)
    stdout_console.print(f"fingerprint {arm.fingerprint}", markup=False)
    if arm.overrides:
        stdout_console.print("overrides " + ", ".join(f"{k}={_display(v)}" for k, v in arm.overrides), markup=False)
    table = Table("flag", "value", "inert because")
    for name, value in arm.flags().items():
        table.add_row(name, _display(value), inert.get(name, ""))
    stdout_console.print(table)

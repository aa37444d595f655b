"""How a command's options become one typed object: `options_command` makes a frozen dataclass's
fields (each an `Annotated` Typer option) the command's parameters, option groups included, and
hands the command the parsed object; `option_values` passes options on to a library call that
takes them under the same names. The option groups several commands share are declared here
(the output format, the Hub's), from the option types of `cli/common.py`.

Start-up matters (this runs while `ccpo --help` builds every command): the standard library,
typer and `cli/common.py` only.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import typer

from ccpo_cli.cli.common import (
    FormatOption,
    HubDeadlineOption,
    HubEndpointOption,
    HubPrivateOption,
    HubTimeoutOption,
    HubTokenFileOption,
    HubTokenOption,
    JsonOption,
    OutputFormat,
    TableOption,
    handle_errors,
    output_format,
)


@dataclass(frozen=True)
class Output:
    """How a command prints its result: --json or --format (an option group)."""

    as_json: JsonOption = False
    fmt: FormatOption = None

    def chosen(self) -> OutputFormat:
        return output_format(self.fmt, self.as_json)


@dataclass(frozen=True)
class TablesOutput(Output):
    """--json or --format, and --table for a command that prints several tables."""

    table: TableOption = None


@dataclass(frozen=True)
class HubPublishing:
    """How `ccpo publish` and `ccpo train --push-to-hub` reach the Hub: an option group (None:
    not given; the publisher's default)."""

    private: HubPrivateOption = None
    token: HubTokenOption = None
    token_file: HubTokenFileOption = None
    timeout: HubTimeoutOption = None
    deadline: HubDeadlineOption = None
    endpoint: HubEndpointOption = None


@dataclass(frozen=True)
class HubConnection:
    """How `ccpo sync push` and `ccpo sync pull` reach the Hub: an option group."""

    token: HubTokenOption = None
    token_file: HubTokenFileOption = None
    timeout: HubTimeoutOption = None
    endpoint: HubEndpointOption = None


def scoped_option(scope: str) -> Callable[..., Any]:
    """A maker of the options only one part of a command reads (`ccpo train`'s local or verl
    backend, `ccpo publish --follow`): each one's help starts with `SCOPE: `, said once."""

    def option(*names: str, help: str, **settings: Any) -> Any:  # noqa: A002
        return typer.Option(*names, help=f"{scope}: {help}", **settings)

    return option


def options_command(options_type: type) -> Callable[[Callable], Callable]:
    """A command whose options are the fields of one frozen dataclass (`options_type`): Typer reads
    each field (its `Annotated` option, its default) as a parameter, and the command body gets
    them as one typed object, `command(ctx, options)`, instead of unpacking dozens of names.
    Errors are handled as every command's are (`handle_errors`).

    A field whose type is itself such a dataclass is an option group several commands share
    (`HubPublishing`): its options stand in the field's place, declared once, the way
    sqlite-utils declares its shared click options once as decorators."""
    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    parameters = [context, *_option_parameters(options_type)]

    def decorate(command: Callable[[typer.Context, Any], None]) -> Callable:
        def parsed(ctx: typer.Context, **options: Any) -> None:
            return command(ctx, _grouped(options_type, options))

        for name in ("__name__", "__qualname__", "__module__", "__doc__"):
            setattr(parsed, name, getattr(command, name))
        # Typer builds the parameters from the signature; handle_errors' wrapper keeps it.
        parsed.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        parsed.__annotations__ = {p.name: p.annotation for p in parameters}
        return handle_errors(parsed)

    return decorate


def _option_group(hint: Any) -> type | None:
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _option_parameters(options_type: type) -> list[inspect.Parameter]:
    """The command's parameters, in the fields' order, an option group's in its field's place."""
    hints = typing.get_type_hints(options_type, include_extras=True)
    parameters = []
    for field in dataclasses.fields(options_type):
        group = _option_group(hints[field.name])
        if group is not None:
            parameters += _option_parameters(group)
            continue
        default = field.default
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=hints[field.name],
                default=inspect.Parameter.empty if default is dataclasses.MISSING else default,
            )
        )
    return parameters


def _grouped(options_type: type, values: dict[str, Any]) -> Any:
    """The typed options from Typer's values by name, each option group as its own object."""
    hints = typing.get_type_hints(options_type, include_extras=True)
    fields = {}
    for field in dataclasses.fields(options_type):
        group = _option_group(hints[field.name])
        fields[field.name] = values[field.name] if group is None else _grouped(group, values)
    return options_type(**fields)


def option_values(options: Any, names: Iterable[str]) -> dict[str, Any]:
    """These fields of a command's options by name: for the library call whose keyword
    arguments have the options' names."""
    return {name: getattr(options, name) for name in names}

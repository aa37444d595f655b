"""The benchmark protocol (configs/protocol/<name>.yaml) and how its values are written for Hydra."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ccpo_cli.bounded_yaml import read_yaml_file
from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import configs_dir


@dataclass(frozen=True)
class HostProfile:
    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol:
    name: str
    entrypoint: str
    overrides: Mapping[str, Any]
    environment: Mapping[str, str]
    placeholder_data: Mapping[str, Any]
    host_profiles: Mapping[str, HostProfile]

    def host_profile(self, name: str) -> HostProfile:
        try:
            return self.host_profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.host_profiles))
            raise InvalidInput(
                f"unknown host profile {name!r} for protocol {self.name} (known: {known})"
            ) from None

    def placeholder_rows(self, train_rows: int) -> dict[str, int]:
        """The rows of the placeholder dataset the launch writes for verl's data loader: a
        train batch's worth (`train_rows`), and the protocol's validation rows."""
        return {"train": train_rows, "test": int(self.placeholder_data.get("val_rows", 128))}

    def placeholder_fields(self) -> dict[str, str]:
        return {
            "data_source": str(self.placeholder_data.get("data_source", "text")),
            "ability": str(self.placeholder_data.get("ability", "agent")),
        }


def load_protocol(name: str = "alfworld") -> Protocol:
    path = configs_dir() / "protocol" / f"{name}.yaml"
    if not path.is_file():
        raise InvalidInput(f"no protocol named {name!r} ({path} does not exist)")
    document = read_yaml_file(path)
    if not isinstance(document, dict):
        raise InvalidInput(f"{path}: expected a mapping with 'entrypoint' and 'overrides'")
    for key in ("entrypoint", "overrides"):
        if key not in document:
            raise InvalidInput(f"{path}: missing field {key!r}")
    profiles = {
        profile_name: HostProfile(
            name=profile_name,
            overrides=dict((body or {}).get("overrides") or {}),
            environment={k: str(v) for k, v in ((body or {}).get("environment") or {}).items()},
        )
        for profile_name, body in (document.get("host_profiles") or {}).items()
    }
    profiles.setdefault("reference", HostProfile(name="reference"))
    return Protocol(
        name=document.get("name", name),
        entrypoint=document["entrypoint"],
        overrides=dict(document["overrides"]),
        environment={k: str(v) for k, v in (document.get("environment") or {}).items()},
        placeholder_data=dict(document.get("placeholder_data") or {}),
        host_profiles=profiles,
    )


# A string Hydra reads back as the same string without quotes: no grammar characters, and not a
# word or number Hydra would turn into another type.
_PLAIN_STRING = re.compile(r"[A-Za-z_/$][A-Za-z0-9_./:$-]*")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}


def hydra_value(value: Any) -> str:
    """A Python value written as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value)
    if _PLAIN_STRING.fullmatch(text) and text.lower() not in _HYDRA_WORDS:
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def hydra_override(key: str, value: Any) -> str:
    return f"{key}={hydra_value(value)}"

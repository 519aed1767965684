"""Per-organization limits, from a TOML file (`--limits`), over defaults sized for one node:

    [default]                                   # every organization, on every model
    requests_per_minute = 6000
    tokens_per_minute = 10000000                # estimated prompt + max_tokens, then settled
    requests_in_flight = 256                    # for the organization, all models together
    image_bytes_per_minute = 104857600          # remote images fetched for it

    [orgs.acme]                                 # one organization, on every model
    tokens_per_minute = 200000

    [orgs.acme.models."b3os/smollm2-135m-instruct"]   # one organization on one model
    requests_per_minute = 60

Each table names only what it changes; the more specific wins."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_minute: int = 6000
    tokens_per_minute: int = 10_000_000
    requests_in_flight: int = 256
    image_bytes_per_minute: int = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    default: Limits = field(default_factory=Limits)
    orgs: Mapping[str, Limits] = field(default_factory=dict)
    models: Mapping[tuple[str, str], Limits] = field(default_factory=dict)  # (org, model)

    def for_org(self, org: str) -> Limits:
        return self.orgs.get(org, self.default)

    def for_model(self, org: str, model: str) -> Limits:
        return self.models.get((org, model), self.for_org(org))


class LimitsFileError(ValueError):
    pass


def load(path: Path | None) -> LimitsConfig:
    if path is None:
        return LimitsConfig()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LimitsFileError(f"{path}: {exc}") from exc
    unknown = set(data) - {"default", "orgs"}
    if unknown:
        raise LimitsFileError(f"{path}: unknown tables {sorted(unknown)}: use default and orgs")
    default = _limits(Limits(), data.get("default", {}), f"{path} [default]")
    orgs: dict[str, Limits] = {}
    models: dict[tuple[str, str], Limits] = {}
    for org, table in _table(data.get("orgs", {}), f"{path} [orgs]").items():
        where = f"{path} [orgs.{org}]"
        table = dict(_table(table, where))
        per_model = _table(table.pop("models", {}), f"{where}.models")
        orgs[org] = _limits(default, table, where)
        for model, model_table in per_model.items():
            models[(org, model)] = _limits(
                orgs[org], _table(model_table, f"{where}.models.{model}"), where
            )
    return LimitsConfig(default, orgs, models)


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise LimitsFileError(f"{where}: expected a table")
    return value


def _limits(base: Limits, table: Mapping[str, Any], where: str) -> Limits:
    names = {f.name for f in dataclasses.fields(Limits)}
    unknown = set(table) - names
    if unknown:
        raise LimitsFileError(f"{where}: unknown limits {sorted(unknown)}; known: {sorted(names)}")
    for name, value in table.items():
        if type(value) is not int or value < 0:
            raise LimitsFileError(f"{where}: {name} must be a whole number, 0 or more")
    return dataclasses.replace(base, **table)

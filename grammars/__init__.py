"""Model families as data: one TOML file per chat format (`chatml.toml`, ...), matched on the
model's chat template. Adding a family is adding a file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    match: tuple[str, ...] = ()
    system_anywhere: bool = False


# A chat template no file matches: nothing is assumed about it.
UNKNOWN = ModelFamily("unknown")


def families() -> list[ModelFamily]:
    found = []
    for path in sorted(FOLDER.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        found.append(
            ModelFamily(
                name=data["name"],
                match=tuple(data.get("match", ())),
                system_anywhere=bool(data.get("system_anywhere", False)),
            )
        )
    return found


def family_for(chat_template: str | None) -> ModelFamily:
    for family in families():
        if chat_template and any(marker in chat_template for marker in family.match):
            return family
    return UNKNOWN

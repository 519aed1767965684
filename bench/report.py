"""Rows of results -> results.md (a table per scenario) and results.json in the run's folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    scenario: str
    case: str
    values: dict[str, Any] = field(default_factory=dict)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def markdown(rows: list[Row], notes: dict[str, str] | None = None) -> str:
    out = []
    for scenario in dict.fromkeys(row.scenario for row in rows):
        group = [row for row in rows if row.scenario == scenario]
        columns = list(dict.fromkeys(key for row in group for key in row.values))
        out.append(f"### {scenario}\n")
        if notes and scenario in notes:
            out.append(notes[scenario] + "\n")
        out.append("| case | " + " | ".join(columns) + " |")
        out.append("|---|" + "---|" * len(columns))
        for row in group:
            cells = " | ".join(_cell(row.values.get(column)) for column in columns)
            out.append(f"| {row.case} | {cells} |")
        out.append("")
    return "\n".join(out)


def write(rows: list[Row], folder: Path, meta: dict[str, Any], notes: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "notes": notes, "rows": [asdict(row) for row in rows]}
    (folder / "results.json").write_text(json.dumps(document, indent=2))
    table = folder / "results.md"
    table.write_text(markdown(rows, notes))
    return table

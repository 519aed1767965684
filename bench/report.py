"""Rows of results -> a markdown table and a JSON file in the run's folder."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


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


def markdown(rows: list[Row]) -> str:
    out = []
    for scenario in dict.fromkeys(row.scenario for row in rows):
        group = [row for row in rows if row.scenario == scenario]
        columns = list(dict.fromkeys(key for row in group for key in row.values))
        out.append(f"### {scenario}\n")
        out.append("| case | " + " | ".join(columns) + " |")
        out.append("|---|" + "---|" * len(columns))
        for row in group:
            cells = " | ".join(_cell(row.values.get(column)) for column in columns)
            out.append(f"| {row.case} | {cells} |")
        out.append("")
    return "\n".join(out)


def write(rows: list[Row], folder: Path, meta: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(row) for row in rows]}, indent=2)
    )
    table = folder / "results.md"
    table.write_text(markdown(rows))
    return table

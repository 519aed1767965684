"""Rows of results -> results.md (the run's header, then a table per scenario) and results.json in
the run's folder. The header says when, at which commit and on which machine the run measured."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.machine import Machine


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


def header(meta: dict[str, Any]) -> str:
    """The date, the commit, the machine and its measured rates, the servers, the run's size."""
    machine = Machine(**meta["machine"])
    commit = meta["commit"][:12] + (", with uncommitted changes" if meta["dirty"] else "")
    if meta["local"]:
        server = f"{meta['model']}, started by this run on this machine"
    else:  # measured through its URL: its own machine may not be the one described here
        server = f"{meta['model']} at {meta['target']}, not started by this run (the machine "
        server += "above is the one the bench ran on)"
    lines = [
        f"# `{meta['command']}`",
        "",
        f"- date: {meta['date']}",
        f"- commit: {commit}",
        f"- machine: {machine.describe()}",
        f"- measured in this run: {machine.rates()}",
        f"- server: {server}",
    ]
    if meta["compared"]:
        lines.append(f"- compared with: {meta['compared']}")
    size = "quick (every scenario reduced)" if meta["quick"] else "full"
    lines += [f"- run: {size}, {meta['seconds']:.0f} s", ""]
    return "\n".join(lines) + "\n"


def title(meta: dict[str, Any]) -> str:
    """The header in two lines, for the plots."""
    machine = Machine(**meta["machine"])
    return f"{meta['date']}, commit {meta['commit'][:12]}\n{machine.describe()}; {machine.rates()}"


def write(rows: list[Row], folder: Path, meta: dict[str, Any], notes: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "notes": notes, "rows": [asdict(row) for row in rows]}
    (folder / "results.json").write_text(json.dumps(document, indent=2))
    table = folder / "results.md"
    table.write_text(header(meta) + markdown(rows, notes))
    return table

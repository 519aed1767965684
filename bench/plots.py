"""results.png: one panel per scenario that ran, from the same rows as the tables, under the run's
header (its date, commit and machine)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.report import Row


def _latency(axes: Any, rows: list[Row]) -> None:
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        match = re.fullmatch(r"(.+) c=(\d+)", row.case)
        ttft = row.values.get("TTFT p50 ms")
        if match and ttft is not None:
            lines[match.group(1)].append((int(match.group(2)), ttft))
    for label, points in lines.items():
        xs, ys = zip(*sorted(points), strict=True)
        axes.plot(xs, ys, marker="o", label=label)
    axes.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="TTFT p50 (ms)")
    axes.set_title("time to first token")
    axes.legend(fontsize=6)


def _bars(axes: Any, rows: list[Row], key: str, title: str) -> None:
    pairs = [(row.case, row.values[key]) for row in rows if row.values.get(key) is not None]
    if not pairs:
        return
    labels, values = zip(*pairs, strict=True)
    axes.barh(labels, values)
    axes.set_title(title)
    axes.set_xlabel(key)
    axes.tick_params(axis="y", labelsize=6)


COLORS = {"template": "tab:blue", "grammar": "tab:orange", "ttft": "tab:green", "model": "tab:red"}


def _phases(axes: Any, rows: list[Row]) -> None:
    """Template and grammar from the head; ttft to the first token; model to the last."""
    for index, row in enumerate(rows):
        left = 0.0
        for phase, color in COLORS.items():
            value = row.values.get(f"{phase} p50 ms")
            if value is None:
                continue
            ends_at = value if phase in ("ttft", "model") else left + value
            label = phase if index == 0 else None
            axes.barh(index, max(ends_at - left, 0.0), left=left, color=color, label=label)
            left = ends_at
    axes.set_yticks(range(len(rows)), [row.case for row in rows], fontsize=6)
    axes.set_title("phases (p50, ms from the request head)")
    axes.legend(fontsize=6)


def _decode(axes: Any, rows: list[Row]) -> None:
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        match = re.fullmatch(r"(.+), (\d+) tokens, (c=\d+|.+ tools auto)", row.case)
        rate = row.values.get("tok/s total")
        if match and rate is not None:
            lines[f"{match.group(1)}, {match.group(3)}"].append((int(match.group(2)), rate))
    for label, points in lines.items():
        xs, ys = zip(*sorted(points), strict=True)
        axes.plot(xs, ys, marker="o", label=label)
    axes.set(xlabel="context (tokens)", ylabel="decode tokens/s, all streams")
    axes.set_title("decode")
    axes.legend(fontsize=6)


def _sessions(axes: Any, rows: list[Row]) -> None:
    """Each session's requests in order: time to first token, the share cached as a label."""
    lines: dict[str, list[tuple[float, float | None]]] = defaultdict(list)
    for row in rows:
        match = re.fullmatch(r"(\S+) (live )?t\d+\.\d+ \((.+)\)", row.case)
        ttft = row.values.get("TTFT ms")
        if match and ttft is not None:
            label = f"{match.group(1)}{' live' if match.group(2) else ''} ({match.group(3)})"
            lines[label].append((ttft, row.values.get("cached %")))
    for label, points in lines.items():
        xs = range(1, len(points) + 1)
        axes.plot(xs, [ttft for ttft, _ in points], marker="o", label=label)
        for x, (ttft, share) in zip(xs, points, strict=True):
            if share is not None:
                axes.annotate(f"{share:.0f}%", (x, ttft), fontsize=5)
    axes.set(yscale="log", xlabel="request of the session", ylabel="TTFT (ms)")
    axes.set_title("agent sessions (labels: % of the prompt cached)")
    axes.legend(fontsize=6)


def plot(rows: list[Row], path: Path, title: str = "") -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_scenario: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_scenario[row.scenario].append(row)
    panels = [
        ("latency", lambda ax, r: _latency(ax, r)),
        ("phases", _phases),
        ("prefix cache", lambda ax, r: _bars(ax, r[:2], "TTFT p50 ms", "prefix cache")),
        ("constrained decoding", lambda ax, r: _bars(ax, r, "server ttft p50 ms", "constraints")),
        ("front-end overhead", lambda ax, r: _bars(ax, r, "per event us", "overhead per event")),
        ("decode", _decode),
        ("agent sessions", _sessions),
    ]
    present = [(name, draw) for name, draw in panels if by_scenario.get(name)]
    if not present:
        return None
    figure, grid = plt.subplots(len(present), 1, figsize=(9, 3.2 * len(present)), squeeze=False)
    for axes, (name, draw) in zip(grid[:, 0], present, strict=True):
        draw(axes, by_scenario[name])
    if title:
        figure.suptitle(title, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path

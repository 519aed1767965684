"""Engines by name; each factory imports its runtime lazily, so choosing one never loads another."""

from __future__ import annotations

from collections.abc import Callable

from server.config import Settings
from server.engines.base import Engine
from server.models.source import ModelSource


def _sglang(settings: Settings, source: ModelSource) -> Engine:
    from server.engines.sglang.engine import SGLangEngine

    return SGLangEngine(settings, source)


def _sglang_remote(settings: Settings, source: ModelSource) -> Engine:
    from server.engines.sglang.remote import SGLangRemoteEngine

    return SGLangRemoteEngine(settings, source)


def _replay(settings: Settings, source: ModelSource) -> Engine:
    from server.engines.replay import ReplayEngine

    return ReplayEngine(settings, source)


ENGINES: dict[str, Callable[[Settings, ModelSource], Engine]] = {
    "sglang": _sglang,
    "sglang-remote": _sglang_remote,  # SGLang's HTTP server or sglang-router at --engine-url
    "replay": _replay,  # no model: measures the front end's own cost (python -m bench overhead)
}


def create_engine(settings: Settings, source: ModelSource) -> Engine:
    """`settings.engine` was checked against ENGINES when the settings were read."""
    return ENGINES[settings.engine](settings, source)

"""Engines by name; each factory imports its runtime lazily, so choosing one never loads another.
A factory gets the settings, the model and the tokenizer this server renders prompts with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the settings read this module for the engines' names
    from server.config import Settings
    from server.engines.base import Engine
    from server.models.source import ModelSource
    from server.tokenizer import Tokenizer


def _sglang(settings: Settings, source: ModelSource, tokenizer: Tokenizer) -> Engine:
    from server.engines.sglang.engine import SGLangEngine

    return SGLangEngine(settings, source)  # SGLang loads the model's tokenizer itself


def _sglang_remote(settings: Settings, source: ModelSource, tokenizer: Tokenizer) -> Engine:
    from server.engines.sglang.remote import SGLangRemoteEngine

    return SGLangRemoteEngine(settings, tokenizer)


def _replay(settings: Settings, source: ModelSource, tokenizer: Tokenizer) -> Engine:
    from server.engines.replay import ReplayEngine

    return ReplayEngine(settings, source)


def prepare_engine(settings: Settings) -> None:
    """What an engine starts before the model is read, to run beside it: the in-process SGLang
    engine's forkserver, on a CPU (see server/engines/sglang/forkserver.py)."""
    if settings.engine == "sglang":
        from server.engines.sglang import forkserver

        forkserver.start(settings)


EngineFactory = Callable[["Settings", "ModelSource", "Tokenizer"], "Engine"]
ENGINES: dict[str, EngineFactory] = {
    "sglang": _sglang,
    "sglang-remote": _sglang_remote,  # SGLang's HTTP server or sglang-router at --engine-url
    "replay": _replay,  # no model: measures the front end's own cost (python -m bench overhead)
}


def create_engine(settings: Settings, source: ModelSource, tokenizer: Tokenizer) -> Engine:
    """`settings.engine` was checked against ENGINES when the settings were read."""
    return ENGINES[settings.engine](settings, source, tokenizer)

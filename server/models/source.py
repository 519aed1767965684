"""Resolves `--model` to what SGLang and the tokenizer load, and the id clients send."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server.config import Settings
from server.models import embedded
from server.models.embedded import ModelSetupError


@dataclass(frozen=True, slots=True)
class ModelSource:
    path: str  # an HF model folder, or an HF hub id
    served_name: str
    is_embedded: bool = False


def resolve(settings: Settings) -> ModelSource:
    """The embedded default is converted here on first use (progress is logged)."""
    if settings.model is None:
        folder = embedded.ensure_converted(settings.cache_dir)
        name = settings.served_model_name or embedded.SERVED_NAME
        return ModelSource(str(folder), name, is_embedded=True)
    folder = Path(settings.model).expanduser()
    if folder.is_dir():
        return ModelSource(str(folder.resolve()), settings.served_model_name or folder.name)
    if settings.model.startswith(("/", ".", "~")):
        raise ModelSetupError(f"--model {settings.model}: no such folder")
    # Otherwise a hub id ("org/name"), resolved by the runtime from the local HF cache or the hub.
    return ModelSource(settings.model, settings.served_model_name or settings.model)

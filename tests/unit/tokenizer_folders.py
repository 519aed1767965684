"""The embedded model's tokenizer copied into folders that say another model type, for the tests
of which tokenizer class a folder gets (in the front and in SGLang's processes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def typed_copy(embedded: Path, folder: Path, model_type: str) -> Path:
    """The embedded model's tokenizer in `folder`, its config.json saying `model_type`."""
    for name in TOKENIZER_FILES:
        shutil.copy(embedded / name, folder / name)
    config = json.loads((embedded / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    return folder

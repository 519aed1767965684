"""The chat templates models publish (templates/, each as its model's repository has it, with where
it was read in templates/SOURCES.toml) and a tokenizer for each: the embedded model's vocabulary
with the model's own added tokens and its template, enough to render, recognise and tokenize
the format without the model."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Published:
    format: str  # SGLang's tool-call parser that reads it
    model: str  # the model (its Hugging Face id) whose template it is
    file: str  # under templates/
    repo: str  # where it was read, at which commit and path
    commit: str
    path: str
    special_tokens: tuple[str, ...]  # the model's added tokens the template and format use
    bos: str
    eos: str
    arguments: str = "object"  # what a call's arguments are to the template: object or string
    official: bool = False  # read from the vendor's own repository
    notes: str = ""
    # Where a call the template writes in history begins, where it writes more before it than
    # the model does (say why in `notes`).
    call_from: str = ""
    call_to: str = ""  # where it ends, likewise
    # False where the template cannot write a call as its format has it (said in `notes`).
    writes_calls: bool = True
    # False where SGLang's detector cannot read the call as the template writes it (said in
    # `notes`): the family's grammar writes the form it reads.
    sglang_reads: bool = True

    @property
    def template(self) -> str:
        return (TEMPLATES / self.file).read_text()

    @property
    def id(self) -> str:
        return self.model.rsplit("/", 1)[-1]


@cache
def published() -> tuple[Published, ...]:
    sources = tomllib.loads((TEMPLATES / "SOURCES.toml").read_text())
    return tuple(
        Published(**{**entry, "special_tokens": tuple(entry["special_tokens"])})
        for entry in sources["template"]
    )


def tokenizer_folder(entry: Published, folder: Path, embedded: Path) -> Path:
    """A tokenizer folder for `entry`'s format: the embedded vocabulary, the model's special
    tokens added as such, its bos and eos, and its chat template."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(embedded / "tokenizer.json"))
    tokens = [*entry.special_tokens, *(t for t in (entry.bos, entry.eos) if t.startswith("<"))]
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in tokens])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = json.loads((embedded / "tokenizer_config.json").read_text())
    config |= {"eos_token": entry.eos, "pad_token": entry.eos}
    if entry.bos.startswith("<"):
        config["bos_token"] = entry.bos
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "chat_template.jinja").write_text(entry.template)
    return folder

"""Model formats: how a model presents tools, writes calls and reasons, and how the node serves
that from the libraries that define it.

    families/*.toml  one file a tool-call format: the SGLang parsers and the xgrammar structural
                     tag that serve it, and what rendering its template needs beside them
    family.py        that data, loaded
    recognize.py     the format of a model, from its chat template (SGLang's detection first)
    prompt.py        a conversation through the model's template into token ids
    constraints.py   the xgrammar constraint of a request, in the model's format
    reading.py       the model's text into canonical events, read by SGLang's parsers
    libraries.py     the SGLang and xgrammar pieces used, checked against their pinned releases

Adding a format SGLang knows is adding a file."""

from grammars.family import UNKNOWN, ModelFamily, families, family
from grammars.recognize import (
    ModelFormat,
    Reasoning,
    UnknownFormat,
    format_for,
    format_of,
    reads_tools,
)

__all__ = [
    "UNKNOWN",
    "ModelFamily",
    "ModelFormat",
    "Reasoning",
    "UnknownFormat",
    "families",
    "family",
    "format_for",
    "format_of",
    "reads_tools",
]

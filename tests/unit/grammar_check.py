"""What a constraint lets a model write, checked with xgrammar's own matcher on a tokenizer: the
text as a whole answer (the grammar then lets the answer end)."""

from __future__ import annotations

from functools import cache
from typing import Any

from xgrammar import CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenizerInfo

from server.engines.base import Constraint


@cache
def _compiler(tokenizer: Any) -> tuple[GrammarCompiler, int]:
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    return GrammarCompiler(info), info.stop_token_ids[0]


@cache
def compiled(tokenizer: Any, constraint: Constraint) -> CompiledGrammar:
    compiler, _ = _compiler(tokenizer)
    if constraint.kind == "structural_tag":
        return compiler.compile_structural_tag(constraint.value)
    assert constraint.kind == "json_schema"
    return compiler.compile_json_schema(constraint.value)


def accepts(tokenizer: Any, constraint: Constraint, text: str) -> bool:
    """The constraint takes `text` as a whole answer: every character of it, then its end."""
    _, stop = _compiler(tokenizer)
    matcher = GrammarMatcher(compiled(tokenizer, constraint))
    return matcher.accept_string(text) and matcher.accept_token(stop)

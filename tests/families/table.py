"""The table of model formats in docs/families.md, made from the family files and the published
templates: per family, the SGLang tool-call parser that reads its calls, the reasoning parser that
reads its reasoning (as the family names it, or as SGLang's detection names it for each published
template), what constrains its calls, and the templates it is tested with.
`python -m tests.families.table` prints it; tests/unit/test_formats.py holds the docs to it."""

from __future__ import annotations

from collections import defaultdict

from grammars import families, libraries
from grammars.family import ModelFamily
from tests.families.formats import prepared
from tests.families.published import published


def constrained_by(family: ModelFamily) -> str:
    if family.call is not None:
        return "its own strings (`call`)"
    if family.structural_tag is not None:
        return f"xgrammar `{family.structural_tag}`"
    detector = libraries.tool_parsers()[family.tool_parser or ""]()
    if detector.supports_structural_tag():
        try:
            detector.structure_info()("f")
            return "the detector's structure"
        except (NotImplementedError, ValueError, AttributeError):
            pass
    return "SGLang's JSON array (required, named)"


def table() -> str:
    reasoning: dict[str, set[str]] = defaultdict(set)
    tested: dict[str, list[str]] = defaultdict(list)
    for index, entry in enumerate(published()):
        found = prepared(index)
        name = found.form.family.name
        tested[name].append(entry.model.split(" (")[0])
        if found.form.reasoning is not None:
            reasoning[name].add(found.form.reasoning.parser)
    rows = [
        "| family | models | SGLang tool-call parser | reasoning parser | calls constrained by "
        "| published templates tested |",
        "|---|---|---|---|---|---|",
    ]
    for family in families():
        if family.tool_parser is None:
            continue
        parsers = {family.reasoning_parser} if family.reasoning_parser else reasoning[family.name]
        shown = ", ".join(f"`{parser}`" for parser in sorted(p for p in parsers if p)) or "none"
        templates = ", ".join(dict.fromkeys(tested[family.name])) or "none found published"
        if family.taught is not None:
            templates = "SmolLM2-135M-Instruct's (the embedded model, on the engine)"
        rows.append(
            f"| `{family.name}` | {family.models} | `{family.tool_parser}` | {shown} "
            f"| {constrained_by(family)} | {templates} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())

"""Structural tags as EBNF, for a runtime behind sglang-router: the router (0.3.2) re-encodes
the sampling parameters it forwards and drops `structural_tag` (every tool call, JSON answer and
thinking budget would go unconstrained), while `ebnf` passes. xgrammar prints a structural tag's
grammar as its EBNF, extensions included (tag dispatch, token budgets), which the workers'
xgrammar (the same pinned version) compiles back into the same grammar."""

from __future__ import annotations

from collections import OrderedDict

from server.engines.base import Constraint
from server.engines.sglang.outputs import compiler_reason
from server.errors import ConstraintRejected
from server.models.embedded import ModelSetupError

CAPACITY = 1024  # grammars kept; a request's tools and schemas repeat across an agent's turns


class EbnfConstraints:
    """Converts once per distinct structural tag, and keeps the conversion."""

    def __init__(self) -> None:
        try:
            from xgrammar import Grammar
        except ImportError:
            raise ModelSetupError(
                "behind sglang-router, grammars travel as EBNF, which needs xgrammar here: "
                "pip install xgrammar (the version of the workers' SGLang)"
            ) from None
        self._grammar = Grammar
        self._known: OrderedDict[str, Constraint] = OrderedDict()

    def routable(self, constraint: Constraint | None) -> Constraint | None:
        """The same grammar in a kind the router forwards; raises `ConstraintRejected` where
        xgrammar cannot build it (as the workers would)."""
        if constraint is None or constraint.kind != "structural_tag":
            return constraint
        found = self._known.get(constraint.value)
        if found is None:
            try:
                grammar = self._grammar.from_structural_tag(constraint.value)
            except (RuntimeError, ValueError) as error:
                raise ConstraintRejected(compiler_reason(str(error))) from None
            found = self._known[constraint.value] = Constraint("ebnf", str(grammar))
            if len(self._known) > CAPACITY:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(constraint.value)
        return found

"""What an engine's grammar for a schema produces, which is not always what the schema validates.

xgrammar reads ``{"properties": ...}`` as objects only, and a schema with an
``anyOf`` through that keyword alone. The analysis needs these upper bounds
to tell which sibling keywords matter, and to prove that a ``oneOf`` the
engine reads as ``anyOf`` still accepts each value through one branch only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grammar_guard.core.schema.capabilities import EngineCapabilities
from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.pointers import MISSING
from grammar_guard.core.schema.values import expand_number
from grammar_guard.core.schema.vocabulary import JSON_TYPES

# Past this many branches oneOf is not worth proving exclusive.
MAX_ONE_OF_BRANCHES = 256

# The types a grammar produces, and for a closed object the only keys it can
# write (None: any).
GrammarShape = tuple[frozenset[str], frozenset[str] | None]


class GrammarTypes:
    """Upper bounds on what the grammars of one document's schemas produce, memoised."""

    def __init__(self, caps: EngineCapabilities, facts: SchemaFacts) -> None:
        self.caps = caps
        self.facts = facts
        self._types: dict[int, frozenset[str]] = {}
        self._depth = 0

    def exclusive_keyword(self, node: dict[str, Any]) -> str | None:
        """The keyword the engine reads alone in ``node``, if it holds one."""
        return next((k for k in self.caps.exclusive_keywords if k in node), None)

    def produced_types(
        self, node: dict[str, Any], implicit_type: str | None = None
    ) -> frozenset[str] | None:
        """The types the engine's grammar produces here; None: any JSON value, keywords dropped.

        ``implicit_type`` is the type the engine assumes where the schema
        names none (string, for ``propertyNames``).
        """
        declared = node.get("type")
        if isinstance(declared, str) and declared in JSON_TYPES:
            return expand_number(frozenset({declared}))
        if isinstance(declared, list) and declared:
            return expand_number(frozenset(t for t in declared if isinstance(t, str)))
        if implicit_type is not None:
            return frozenset({implicit_type})
        if self.caps.implied_types is None:
            return JSON_TYPES
        for keyword, implied in self.caps.implied_types:
            if keyword in node:
                return frozenset({implied})
        return None

    def dispatch_types(self, node: dict[str, Any], keyword: str) -> frozenset[str]:
        """The types the engine's grammar for the keyword it reads can produce (at most)."""
        if keyword == "$ref":
            target = self.facts.target(node)
            return self.grammar_types(target) if target is not MISSING else JSON_TYPES
        branches = node.get(keyword)
        if not isinstance(branches, list) or not branches:
            return JSON_TYPES
        sets = [self.grammar_types(branch) for branch in branches]
        if keyword == "allOf":
            return sets[0] if len(sets) == 1 else JSON_TYPES
        return frozenset().union(*sets)

    def grammar_types(self, node: Any) -> frozenset[str]:
        """The types the engine's grammar for ``node`` produces (an upper bound).

        Not what ``node`` validates: xgrammar reads ``{"properties": ...}`` as
        objects only. Sound for keywords next to a branch, since the branch's
        own keywords are analysed where it is walked.
        """
        if node is False:
            return frozenset()
        if not isinstance(node, dict):
            return JSON_TYPES
        key = id(node)
        if key in self._types:
            return self._types[key]
        if self._depth >= SchemaFacts.MAX_DEPTH:
            return JSON_TYPES
        self._types[key] = JSON_TYPES  # a cycle gives no information
        self._depth += 1
        try:
            exclusive = self.exclusive_keyword(node)
            if exclusive in ("const", "enum"):
                types = self.facts.types({exclusive: node[exclusive]})
            elif exclusive is not None:
                types = self.dispatch_types(node, exclusive)
            else:
                produced = self.produced_types(node)
                types = JSON_TYPES if produced is None else produced
        finally:
            self._depth -= 1
        self._types[key] = types
        return types

    def one_of_exclusive(self, branches: Sequence[Any]) -> bool:
        """Whether no value the engine accepts through one branch is valid for another.

        Then oneOf read as anyOf is oneOf. Either no value is valid for two
        branches at all, or what the engine's grammar for a branch produces
        cannot satisfy another (a closed object lacking a required key).
        """
        facts = self.facts
        if len(branches) > MAX_ONE_OF_BRANCHES:
            return False
        shapes = [self.grammar_shape(branch) for branch in branches]
        for i, left in enumerate(branches):
            for j in range(i + 1, len(branches)):
                right = branches[j]
                if facts.exclusive(left, right):
                    continue
                if not (
                    self.produces_only_invalid(shapes[i], right)
                    and self.produces_only_invalid(shapes[j], left)
                ):
                    return False
        return True

    def grammar_shape(self, branch: Any) -> GrammarShape:
        """The types the engine's grammar for ``branch`` produces, and, for closed
        objects, the only keys it can write (None: any)."""
        node = branch
        for _ in range(32):  # through a chain of $refs, as the engine reads them
            exclusive = self.exclusive_keyword(node) if isinstance(node, dict) else None
            if exclusive != "$ref":
                break
            target = self.facts.target(node)
            if target is MISSING:
                return JSON_TYPES, None
            node = target
        if not isinstance(node, dict) or exclusive is not None:
            return self.facts.types(node), None
        produced = self.produced_types(node)
        types = (produced if produced is not None else JSON_TYPES) & self.facts.types(node)
        closed = (
            self.caps.closed_objects
            and node.get("additionalProperties", False) is False
            and node.get("unevaluatedProperties", False) is False
            and not node.get("patternProperties")
            and "propertyNames" not in node
        )
        properties = node.get("properties", {})
        keys = frozenset(properties) if closed and isinstance(properties, dict) else None
        return types, keys

    def produces_only_invalid(self, shape: GrammarShape, other: Any) -> bool:
        """Whether every value of a grammar of ``shape`` is invalid against ``other``."""
        types, keys = shape
        if not types & self.facts.types(other):
            return True
        if types <= {"object"} and keys is not None:
            return bool(self.facts.required_names(other) - keys)
        return False

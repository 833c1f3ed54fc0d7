"""The schema rewrites accept exactly what the client's schema accepts (jsonschema, the oracle).

Two layers:

* property tests (hypothesis, derandomised so CI is deterministic): random
  schemas of the shapes each rewrite handles, and random instances, some
  drawn near the schema so that both verdicts occur;
* the repository's data: every schema of the jsonschemabench sample and of
  the JSON-Schema-Test-Suite that a rewrite changes gives each of its
  labelled instances the same verdict before and after.

The oracle reads ``format`` as an assertion (as the analysis does) for the
formats the pattern table claims, checked by the table's own patterns and
maximum lengths: that each is exact is ``test_format_patterns.py``'s
business; here it is that the rewrite puts them where the format applied. ``pattern`` is
matched as ECMA-262 does, where ``$`` is the very end (Python's also
matches before a final newline). Draft-07's ``dependencies``, which 2020-12
no longer defines, is read as the constraint it was, as the analysis and the
rewrite read it.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest
from harness.schema_data.cases import SAMPLE_DATA_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource
from referencing.jsonschema import DRAFT202012

from grammar_guard.core.schema.formats import DEFINED_FORMATS, format_max_length, format_pattern
from grammar_guard.core.schema.rewrite import rewrite_schema
from grammar_guard.core.schema.vocabulary import subschemas

SUITE = SAMPLE_DATA_DIR / "json-schema-test-suite"
BENCH = SAMPLE_DATA_DIR / "jsonschemabench"
_REMOTE_PREFIX = "http://localhost:1234/"
PROPERTIES = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the oracle -------------------------------------------------------------------------


# ECMA-262's \s: WhiteSpace (TAB, VT, FF, ZWNBSP and every Space_Separator)
# and LineTerminator (LF, CR, LS, PS). Python's \s differs: it holds U+001C
# to U+001F and U+0085, and not U+FEFF.
_ECMA_SPACE = re.escape(
    "\t\x0b\x0c\ufeff\n\r\u2028\u2029"
    + "".join(chr(code) for code in range(0x10000) if unicodedata.category(chr(code)) == "Zs")
)


@functools.lru_cache(maxsize=1024)
def _ecma(pattern: str) -> re.Pattern[str]:
    """``pattern`` for Python's ``re``, with ECMA-262's ``$`` (the very end) and ``\\s``.

    ``\\S`` inside a class keeps Python's reading: no Python class subtracts.
    """
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
            if char == "s" or (char == "S" and not in_class):
                out.pop()
                negation = "^" if char == "S" else ""
                char = _ECMA_SPACE if in_class else f"[{negation}{_ECMA_SPACE}]"
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
    return re.compile("".join(out))


def _pattern_keyword(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {
        "pattern": _pattern_keyword,
        "dependencies": jsonschema.Draft7Validator.VALIDATORS["dependencies"],
    },
)


def _matches(pattern: str, longest: int | None, instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    return (longest is None or len(instance) <= longest) and bool(_ecma(pattern).search(instance))


def _table_formats() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name in DEFINED_FORMATS:
        pattern = format_pattern(name)
        if pattern is not None:
            checker.checks(name)(functools.partial(_matches, pattern, format_max_length(name)))
    return checker


def _remote(uri: str) -> Resource[Any]:
    if not uri.startswith(_REMOTE_PREFIX):
        raise NoSuchResource(ref=uri)
    document = json.loads((SUITE / "remotes" / uri[len(_REMOTE_PREFIX) :]).read_text())
    return Resource.from_contents(document, default_specification=DRAFT202012)


_FORMATS = _table_formats()
_REGISTRY: Registry[Any] = Registry(retrieve=_remote)  # type: ignore[call-arg]


def verdicts(schema: Any, instances: list[Any]) -> list[bool | str]:
    """Each instance's validity under ``schema``; "error" where the oracle cannot tell."""
    validator = _Validator(schema, format_checker=_FORMATS, registry=_REGISTRY)
    out: list[bool | str] = []
    for instance in instances:
        try:
            out.append(validator.is_valid(instance))
        except Exception as exc:  # an unresolvable reference, a regex Python cannot read
            out.append(f"error: {type(exc).__name__}")
    return out


def assert_equivalent(schema: Any, instances: list[Any]) -> Any:
    """Rewrite ``schema``, check it was not changed and that every verdict holds; the result."""
    before = copy.deepcopy(schema)
    rewritten = rewrite_schema(schema)
    assert schema == before, "the rewrite changed its input"
    if rewritten is not schema:
        original, after = verdicts(schema, instances), verdicts(rewritten, instances)
        differ = [
            (instance, was, now)
            for instance, was, now in zip(instances, original, after, strict=True)
            if was != now
        ]
        assert not differ, f"{json.dumps(schema)}\n-> {json.dumps(rewritten)}\n{differ}"
    return rewritten


# --- random schemas and instances -------------------------------------------------------

_NAMES = ("a", "b", "c")
_STRINGS = ("", "a", "b", "ab", "ba", "abc", "aab", "2021-02-28", "2020-02-29", "x@y.z")
_NUMBERS = (-1, 0, 1, 2, 3, 4, 6, 12, 0.5, 1.5, 2.0, 2.5)
_SCALARS = st.one_of(st.none(), st.booleans(), st.sampled_from(_NUMBERS), st.sampled_from(_STRINGS))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from((*_NAMES, "d")), inner, max_size=3)
    ),
    max_leaves=6,
)
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_BOUNDS = st.sampled_from((-1, 0, 1, 1.5, 2, 3, 6))
_COUNTS = st.integers(0, 3) | st.sampled_from((1.0, 2.0))
_PATTERNS = st.sampled_from(("^a", "b", "^a+$", "^[ab]*$", "^(ab)+$"))
_FORMAT_NAMES = st.sampled_from(
    (*(name for name in DEFINED_FORMATS if format_pattern(name)), "unknown-format")
)
_DEFINITION = {"d": {"type": "integer", "minimum": 1}, "e": {"required": ["a"]}}


def _keyword_values(depth: int) -> dict[str, st.SearchStrategy[Any]]:
    def sub() -> st.SearchStrategy[Any]:
        return _schemas(depth + 1)

    return {
        "title": st.just("t"),
        "type": st.sampled_from(_TYPES)
        | st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True),
        "minimum": _BOUNDS,
        "maximum": _BOUNDS,
        "exclusiveMinimum": _BOUNDS,
        "exclusiveMaximum": _BOUNDS,
        "multipleOf": st.sampled_from((2, 3, 4, 5, 6, 0.5)),
        "minLength": _COUNTS,
        "maxLength": _COUNTS,
        "minItems": _COUNTS,
        "maxItems": _COUNTS,
        "minProperties": _COUNTS,
        "maxProperties": _COUNTS,
        "pattern": _PATTERNS,
        "format": _FORMAT_NAMES,
        "enum": st.lists(_SCALARS, min_size=1, max_size=4),
        "const": _SCALARS,
        "required": st.lists(st.sampled_from(_NAMES), max_size=3, unique=True),
        "uniqueItems": st.booleans(),
        "dependentRequired": st.just({"a": ["b"]}),
        "propertyNames": st.sampled_from(
            ({"maxLength": 1}, {"pattern": "^[ab]$"}, {"enum": ["a", "c"]}, True, False)
        ),
        "$ref": st.sampled_from(("#/$defs/d", "#/$defs/e")),
        "properties": st.dictionaries(st.sampled_from(_NAMES), sub(), max_size=2),
        "additionalProperties": st.booleans() | sub(),
        "patternProperties": st.dictionaries(st.sampled_from(("^a", "b$")), sub(), max_size=1),
        "items": st.booleans() | sub(),
        "prefixItems": st.lists(st.booleans() | sub(), min_size=1, max_size=3),
        "contains": sub(),
        "anyOf": st.lists(sub() | st.just(False), min_size=1, max_size=2),
        "not": sub(),
        "allOf": st.lists(sub(), min_size=1, max_size=2),
        "if": sub(),
        "then": sub(),
        "else": sub(),
    }


# Keywords a subschema may hold at each depth: the applicators only near the top.
_SCALAR_KEYWORDS = (
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    "pattern", "format", "enum", "const", "required", "uniqueItems", "dependentRequired",
    "propertyNames", "$ref",
)  # fmt: skip
_APPLICATORS = (
    "properties", "additionalProperties", "patternProperties", "items", "prefixItems",
    "contains", "anyOf", "not", "allOf",
)  # fmt: skip
# Type-specific keywords only, for untyped schemas.
_TYPED_KEYWORDS = (
    "minimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern",
    "format", "minItems", "items", "uniqueItems", "required", "properties", "maxProperties",
    "propertyNames",
)  # fmt: skip


@st.composite
def _schemas(draw: st.DrawFn, depth: int = 0, keywords: tuple[str, ...] | None = None) -> Any:
    if keywords is None:
        keywords = _SCALAR_KEYWORDS + (_APPLICATORS if depth < 2 else ())
    chosen = draw(st.lists(st.sampled_from(keywords), max_size=4, unique=True))
    values = _keyword_values(depth)
    return {keyword: draw(values[keyword]) for keyword in chosen}


# Keyword families for allOf branches: within one, parts often share a keyword,
# which is what the merge has to combine.
_FAMILIES = {
    "numbers": ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                "multipleOf", "enum", "const"),
    "strings": ("type", "minLength", "maxLength", "pattern", "format", "enum", "const"),
    "objects": ("type", "properties", "required", "additionalProperties", "patternProperties",
                "propertyNames", "minProperties", "maxProperties", "dependentRequired"),
    "arrays": ("type", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "applicators": ("type", "$ref", "required", "anyOf", "not", "allOf", "properties"),
    # Branches with an if, a then or an else alone, which can never fail.
    "conditions": ("type", "if", "then", "else", "minimum", "required"),
}  # fmt: skip


@st.composite
def all_of_schemas(draw: st.DrawFn, family: tuple[str, ...]) -> dict[str, Any]:
    """A parent with keywords of ``family`` and an allOf of two to four branches of them."""
    keywords = tuple(keyword for keyword in family if keyword != "allOf")
    parent = draw(_schemas(depth=1, keywords=keywords))
    branches = draw(st.lists(_schemas(depth=1, keywords=family), min_size=2, max_size=4))
    if draw(st.booleans()):  # the common case: one branch says the type
        branches[0]["type"] = draw(st.sampled_from(_TYPES))
    return {**parent, "allOf": branches, "$defs": _DEFINITION}


@st.composite
def untyped_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An object whose properties are untyped schemas of type-specific keywords."""
    untyped = _schemas(depth=1, keywords=_TYPED_KEYWORDS) | _schemas(
        depth=1, keywords=(*_TYPED_KEYWORDS, "title", "enum")
    )
    properties = draw(st.dictionaries(st.sampled_from(_NAMES), untyped, min_size=1, max_size=3))
    top = draw(_schemas(depth=1, keywords=_TYPED_KEYWORDS))
    return {**top, "properties": {**top.get("properties", {}), **properties}, "$defs": _DEFINITION}


@st.composite
def near(draw: st.DrawFn, schema: Any, depth: int = 0) -> Any:
    """A value built from what ``schema`` asks for, so that valid ones come up too."""
    if not isinstance(schema, dict) or depth > 3 or draw(st.integers(0, 4)) == 0:
        return draw(_VALUES)
    if schema.get("enum"):
        return draw(st.sampled_from(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("allOf"), list):
        # What the branches ask for together, shallowly: a value meant for all of them.
        parts = [schema, *(b for b in schema["allOf"] if isinstance(b, dict))]
        together = {k: v for part in parts for k, v in part.items() if k != "allOf"}
        together["properties"] = {
            name: sub for part in parts for name, sub in part.get("properties", {}).items()
        }
        return draw(near(together, depth + 1))
    if schema.get("anyOf"):
        return draw(near(draw(st.sampled_from(schema["anyOf"])), depth + 1))
    numbers = [v for key in _NUMBER_KEYWORDS if isinstance(v := schema.get(key), int | float)]
    if numbers and draw(st.booleans()):  # at and around the bounds, and multiples
        base = draw(st.sampled_from(numbers))
        return draw(st.sampled_from((base, base - 1, base + 1, base + 0.5, 2 * base, 3 * base)))
    if "properties" in schema or "required" in schema:
        properties = schema.get("properties", {})
        names = draw(st.lists(st.sampled_from((*_NAMES, "d")), max_size=3, unique=True))
        return {name: draw(near(properties.get(name, {}), depth + 1)) for name in names}
    if "items" in schema or "prefixItems" in schema:
        head = [draw(near(item, depth + 1)) for item in schema.get("prefixItems", [])]
        tail = draw(st.lists(near(schema.get("items", {}), depth + 1), max_size=2))
        return head + tail
    return draw(_VALUES)


def _instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    return st.lists(near(schema) | _VALUES, min_size=8, max_size=16)


def _run(
    schemas: st.SearchStrategy[Any],
    outcome: Any,
    examples: int = 200,
    instances_of: Callable[[Any], st.SearchStrategy[list[Any]]] | None = None,
) -> Counter[str]:
    """Check every drawn schema; count what ``outcome(schema, rewritten)`` says of each.

    Instances are drawn by ``instances_of(schema)`` (default :func:`_instances`).
    Counted apart: the schemas some drawn instance is valid for, where a
    rewrite that rejects too much would show.
    """
    seen: Counter[str] = Counter()
    draw_instances = instances_of or _instances

    @settings(PROPERTIES, max_examples=examples)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        schema = data.draw(schemas, label="schema")
        instances = data.draw(draw_instances(schema), label="instances")
        rewritten = assert_equivalent(schema, instances)
        seen[outcome(schema, rewritten)] += 1
        if True in verdicts(schema, instances):
            seen[f"{outcome(schema, rewritten)}, some valid"] += 1

    check()
    return seen


@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_all_of_merges_accept_exactly_what_the_all_of_accepts(family: str) -> None:
    seen = _run(
        all_of_schemas(_FAMILIES[family]),
        lambda schema, rewritten: "merged" if "allOf" not in rewritten else "kept",
        examples=120,
    )
    # Not vacuous: merges happen, on schemas with valid instances too.
    assert seen["merged"] >= 15 and seen["merged, some valid"] >= 5, seen


def test_all_of_merges_of_any_keywords_accept_exactly_what_the_all_of_accepts() -> None:
    every = tuple(dict.fromkeys(k for family in _FAMILIES.values() for k in family))
    seen = _run(
        all_of_schemas(every),
        lambda schema, rewritten: "merged" if "allOf" not in rewritten else "kept",
    )
    assert seen["merged, some valid"] >= 40 and seen["kept"] >= 20, seen


def test_untyped_splits_accept_exactly_what_the_untyped_schema_accepts() -> None:
    seen = _run(
        untyped_schemas(),
        lambda schema, rewritten: "split" if "anyOf" in json.dumps(rewritten) else "kept",
    )
    assert seen["split, some valid"] >= 100, seen


def test_formats_written_as_patterns_accept_exactly_what_the_format_accepts() -> None:
    format_schemas = st.fixed_dictionaries(
        {"format": _FORMAT_NAMES},
        optional={
            "type": st.sampled_from(("string", "integer", ["string", "null"])),
            "pattern": _PATTERNS,
            "maxLength": st.integers(0, 12),
        },
    )
    seen = _run(
        format_schemas,
        lambda schema, rewritten: "pattern" if "format" not in json.dumps(rewritten) else "kept",
    )
    assert seen["pattern, some valid"] >= 50, seen


# Dependencies: objects over the instance names, some keywords of other types.
_OBJECT_KEYWORDS = (
    "type", "properties", "required", "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "minimum", "maxLength", "title",
)  # fmt: skip
_TRIGGERS = (*_NAMES, "d")
_DEPENDENCY_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
# What names a schema for references; resolved, the embedded ones are dropped.
_IDENTIFIERS = ("$id", "$anchor", "$dynamicAnchor", "$dynamicRef")


@st.composite
def dependency_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A schema of object keywords, often untyped, and one to three dependency keywords."""
    schema = draw(_schemas(depth=1, keywords=_OBJECT_KEYWORDS))
    names = st.lists(st.sampled_from(_TRIGGERS), max_size=3, unique=True)
    dependent = st.booleans() | _schemas(depth=1, keywords=(*_OBJECT_KEYWORDS, "enum", "not"))
    values = {
        "dependentRequired": names,
        "dependentSchemas": dependent,
        "dependencies": names | dependent,
    }
    for keyword in draw(st.lists(st.sampled_from(_DEPENDENCY_KEYWORDS), min_size=1, unique=True)):
        schema[keyword] = draw(
            st.dictionaries(st.sampled_from(_TRIGGERS), values[keyword], min_size=1, max_size=3)
        )
    if draw(st.integers(0, 4)) == 0:  # an anyOf beside: the dependencies go into its branches
        schema["anyOf"] = draw(
            st.sampled_from(
                (
                    [{"required": ["a"]}, {"type": "string"}],
                    [{"required": ["a"]}, {"required": ["b"]}],
                    [{"required": [_TRIGGERS[0]]}, {"minProperties": 2}],
                )
            )
        )
    return {**schema, "$defs": _DEFINITION}


@st.composite
def _holding_triggers(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    """An object with some trigger names and the names their dependencies require."""
    names = set(draw(st.lists(st.sampled_from(_TRIGGERS), min_size=1, max_size=2)))
    for name in sorted(names):
        for keyword in _DEPENDENCY_KEYWORDS:
            dependency = schema.get(keyword, {}).get(name)
            listed = dependency.get("required") if isinstance(dependency, dict) else dependency
            if isinstance(listed, list) and draw(st.integers(0, 3)):
                names.update(listed)
    properties = schema.get("properties", {})
    return {name: draw(near(properties.get(name, {}), 1)) for name in sorted(names)}


def _dependency_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    return st.lists(_holding_triggers(schema) | near(schema) | _VALUES, min_size=8, max_size=16)


def _dependencies_outcome(schema: Any, rewritten: Any) -> str:
    return "kept" if set(_DEPENDENCY_KEYWORDS) & rewritten.keys() else "written"


def test_dependencies_written_as_any_of_accept_exactly_what_the_dependencies_accept() -> None:
    seen = _run(dependency_schemas(), _dependencies_outcome, 300, _dependency_instances)
    # Not vacuous: most are written, objects with triggers valid for many of them.
    assert seen["written, some valid"] >= 120 and seen["kept"] >= 20, seen


# Negations: schemas with finitely many values, or typed, and the simplest nots.
_FINITE_TYPES = st.sampled_from(("boolean", "null", ["boolean", "null"], ["null", "string"]))
# Numbers and integers, whose complements are the delicate ones.
_NUMERIC_TYPES = st.sampled_from(("integer", "number", ["integer", "boolean"], ["number", "null"]))
_NEGATED = st.one_of(
    st.sampled_from(({}, True, False, {"title": "t"}, {"minLength": 0})),
    st.fixed_dictionaries({"type": _keyword_values(1)["type"] | _NUMERIC_TYPES}),
    st.fixed_dictionaries({"enum": st.lists(_SCALARS, min_size=1, max_size=4)}),
    st.fixed_dictionaries({"const": _SCALARS}),
    # Several integers: the ranges between them are where integers and numbers differ.
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(_NUMBERS), min_size=2, max_size=4)}),
    st.fixed_dictionaries(
        {"type": _keyword_values(1)["type"]},
        optional={"enum": st.lists(_SCALARS, min_size=1, max_size=4), "minimum": _BOUNDS},
    ),
)


@st.composite
def negation_schemas(draw: st.DrawFn) -> Any:
    """A schema of a few keywords, or with finitely many values, and a not of a simple form."""
    keywords = ("type", "enum", "const", "minimum", "maxLength", "required", "title")
    schema = draw(_schemas(depth=1, keywords=keywords))
    if draw(st.integers(0, 5)) == 0:  # definitions, which a false schema would lose
        schema["$defs"] = _DEFINITION
    if draw(st.booleans()) and "type" in schema:
        schema["type"] = draw(_FINITE_TYPES)
    negated = draw(_NEGATED)
    if draw(st.integers(0, 5)) == 0:
        negated = {"not": negated}
    return {**schema, "not": negated}


# A value of each type, a fractional number among them.
_EACH_TYPE = st.sampled_from((None, True, False, 0, 2, 1.5, "a", [], {}, {"a": 1}))


def _negation_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    values = near(schema) | near(schema["not"]) | _EACH_TYPE | _VALUES
    return st.lists(values, min_size=8, max_size=16)


def _negation_outcome(schema: Any, rewritten: Any) -> str:
    return "written" if rewritten is False or "not" not in rewritten else "kept"


def test_negations_written_out_accept_exactly_what_the_not_accepts() -> None:
    seen = _run(negation_schemas(), _negation_outcome, 300, _negation_instances)
    assert seen["written, some valid"] >= 60 and seen["kept"] >= 5, seen


# Combinators: oneOf, not and if over schemas of literals (and some that are not).
_LITERAL_KEYWORDS = (
    "type", "required", "minimum", "exclusiveMaximum", "maxLength", "minItems",
    "minProperties", "title",
)  # fmt: skip
_FORBIDDING = st.fixed_dictionaries(
    {"properties": st.dictionaries(st.sampled_from(_NAMES), st.just(False), min_size=1)}
)
# Property values of few kinds, named (a condition's discriminator), typed, or a finite domain.
_FEW = st.sampled_from((True, False, None, "a", "b", 2, 2.5, -1))
_NAMED = st.one_of(
    st.builds(lambda value: {"const": value}, _FEW),
    st.builds(lambda values: {"enum": values}, st.lists(_FEW, min_size=1, max_size=3)),
)
_TYPED = st.builds(lambda kind: {"type": kind}, st.sampled_from((*_TYPES, ["string", "null"])))
_NAMING = st.fixed_dictionaries(
    {
        "properties": st.dictionaries(
            st.sampled_from(_NAMES), _NAMED | _TYPED, min_size=1, max_size=2
        )
    }
)
_DOMAINS = st.dictionaries(
    st.sampled_from(_NAMES),
    _NAMED | st.sampled_from(({"type": "boolean"}, {"type": "string"})),
    min_size=1,
    max_size=2,
)


# A pattern whose complement has more states than pattern_complement writes.
NO_COMPLEMENT = "^(?:ab){40}"


@st.composite
def _combined_parts(draw: st.DrawFn, depth: int) -> Any:
    """A schema of literals, sometimes with a keyword that has no complement, or nested."""
    if depth < 1 and draw(st.integers(0, 3)) == 0:
        return draw(combinator_schemas(depth + 1))
    part = draw(_schemas(depth=1, keywords=_LITERAL_KEYWORDS) | _FORBIDDING | _NAMING | _NAMED)
    if draw(st.integers(0, 5)) == 0:
        # Complements written from their automata, or none (too many states): kept where negated.
        part["pattern"] = draw(_PATTERNS | st.just(NO_COMPLEMENT))
    return draw(st.sampled_from((part, True, False))) if draw(st.integers(0, 9)) == 0 else part


@st.composite
def combinator_schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """Keywords beside one or more of oneOf, not and if/then/else over literal schemas."""
    schema = draw(_schemas(depth=1, keywords=(*_LITERAL_KEYWORDS, "properties", "enum")))
    if draw(st.integers(0, 2)) == 0:  # properties with finitely many values, as conditions name
        schema["properties"] = draw(_DOMAINS)
    parts = _combined_parts(depth)
    chosen = draw(st.lists(st.sampled_from(("oneOf", "not", "if", "anyOf")), min_size=1,
                           max_size=2, unique=True))  # fmt: skip
    for keyword in chosen:
        if keyword in ("oneOf", "anyOf"):
            schema[keyword] = draw(st.lists(parts, min_size=1, max_size=3))
        elif keyword == "not":
            schema["not"] = draw(parts)
        else:
            schema["if"] = draw(parts)
            for branch in draw(st.lists(st.sampled_from(("then", "else")), unique=True)):
                schema[branch] = draw(parts)
    return schema


def _combinator_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    parts = [schema.get(keyword) for keyword in ("not", "if", "then", "else")]
    parts += [part for keyword in ("oneOf", "anyOf") for part in schema.get(keyword, [])]
    nearby = [near(part) for part in parts if isinstance(part, dict)] or [near(schema)]
    return st.lists(st.one_of(near(schema), *nearby, _EACH_TYPE, _VALUES), min_size=8, max_size=16)


def _combinator_outcome(schema: Any, rewritten: Any) -> str:
    if rewritten is schema:
        return "kept"
    if rewritten is False or not set(_COMBINATOR_KEYWORDS) & rewritten.keys():
        return "written"
    return "inside"  # rewritten within (a nested part, a format), kept at the top


_COMBINATOR_KEYWORDS = ("oneOf", "not", "if")


def test_combinators_written_as_any_of_accept_exactly_what_the_combinators_accept() -> None:
    seen = _run(combinator_schemas(), _combinator_outcome, 400, _combinator_instances)
    # Not vacuous: many are written, with valid instances for many; some
    # kept, at the top or everywhere (a pattern of another shape negated).
    assert seen["written, some valid"] >= 60 and seen["inside"] + seen["kept"] >= 60, seen


# A oneOf whose branches name a property with values of their own (a discriminator).
_KINDS = ("a", "b", "c", 1)


@st.composite
def discriminated_one_ofs(draw: st.DrawFn) -> dict[str, Any]:
    """A oneOf of branches giving "kind" values of their own, often overlapping or unrequired,
    some closed, some untyped (constraining objects only), some requiring "n"."""
    branches: list[Any] = []
    for values in draw(st.lists(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=2,
                                         unique=True), min_size=1, max_size=3)):  # fmt: skip
        branch: dict[str, Any] = {"properties": {"kind": {"enum": values}}}
        if draw(st.booleans()):
            branch["required"] = ["kind"]
        if draw(st.booleans()):
            branch["properties"]["n"] = {"type": draw(st.sampled_from(("integer", "string")))}
        if draw(st.integers(0, 3)) == 0:  # a closed branch not listing "n" excludes this one
            branch["required"] = [*branch.get("required", []), "n"]
        if draw(st.integers(0, 3)) == 0:
            branch["type"] = draw(st.sampled_from(("object", "array")))
        if draw(st.integers(0, 2)) == 0:  # closed: two may share the empty object only
            branch["additionalProperties"] = False
        branches.append(branch)
    schema: dict[str, Any] = {"oneOf": branches}
    if draw(st.booleans()):
        schema["type"] = draw(st.sampled_from(("object", ["object", "null"], "string")))
    if draw(st.booleans()):
        schema["required"] = ["kind"]
    if draw(st.integers(0, 3)) == 0:  # the node's own limit on the discriminator
        values = draw(st.lists(st.sampled_from(_KINDS), min_size=1, unique=True))
        schema["properties"] = {"kind": {"enum": values}}
    return schema


def _discriminated_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    objects = st.fixed_dictionaries(
        {},
        optional={
            "kind": st.sampled_from((*_KINDS, 2)),
            "n": st.sampled_from((1, "x")),
            "m": st.just(0),
        },
    )
    return st.lists(st.one_of(objects, _EACH_TYPE), min_size=8, max_size=16)


def _one_of_outcome(schema: Any, rewritten: Any) -> str:
    return "kept" if isinstance(rewritten, dict) and "oneOf" in rewritten else "written"


def test_exclusive_one_ofs_written_as_any_of_accept_exactly_what_the_one_of_accepts() -> None:
    seen = _run(discriminated_one_ofs(), _one_of_outcome, 300, _discriminated_instances)
    assert seen["written, some valid"] >= 40 and seen["kept"] >= 40, seen


# Bound keywords of a type: branches bounding the same type apart exclude each other.
_RANGE_FAMILIES = (
    ("integer", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    ("number", "minimum", "exclusiveMaximum"),
    ("string", "minLength", "maxLength"),
    ("array", "minItems", "maxItems"),
)
_RANGED_VALUES = st.sampled_from(
    (None, 0, 1, 2, 3, 4, 2.5, "", "a", "aa", "aaa", "b", [], ["a"], ["a", "a"], ["a", "a", "a"])
)


@st.composite
def ranged_one_ofs(draw: st.DrawFn) -> dict[str, Any]:
    """A oneOf of branches bounding one type, apart, meeting or overlapping, often as the
    value of a property each branch requires."""
    type_name, *keywords = draw(st.sampled_from(_RANGE_FAMILIES))
    nested = draw(st.booleans())
    branches: list[Any] = []
    for _ in range(draw(st.integers(2, 3))):
        branch: dict[str, Any] = {"type": draw(st.sampled_from((type_name, [type_name, "null"])))}
        for keyword in draw(st.lists(st.sampled_from(keywords), min_size=1, unique=True)):
            branch[keyword] = draw(st.integers(0, 4))
        # No complement is written for these: only a proof of exclusion serves the oneOf.
        branch.update(
            {"array": {"items": {"pattern": "^a"}}, "string": {"pattern": "a"}}.get(type_name, {})
        )
        if nested:
            branch = {"type": "object", "required": ["v"], "properties": {"v": branch}}
        branches.append(branch)
    return {"oneOf": branches}


def _ranged_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    values = _RANGED_VALUES | st.fixed_dictionaries({"v": _RANGED_VALUES})
    return st.lists(values, min_size=8, max_size=16)


def test_one_ofs_bounded_apart_written_as_any_of_accept_exactly_what_the_one_of_accepts() -> None:
    seen = _run(ranged_one_ofs(), _one_of_outcome, 300, _ranged_instances)
    assert seen["written, some valid"] >= 30 and seen["kept"] >= 40, seen


# Strings told apart by named values, patterns and formats, overlapping or not.
_WORDS = ("", "a", "ab", "ba", "12", "12px", "auto", "1.2.3.4", "::1", "2024-01-02", "x1")
_STRING_BRANCHES = st.one_of(
    st.builds(lambda value: {"const": value}, st.sampled_from(_WORDS)),
    st.builds(
        lambda values: {"enum": values},
        st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3, unique=True),
    ),
    st.builds(
        lambda pattern: {"type": "string", "pattern": pattern},
        st.sampled_from(
            ("^a", "b$", "^[0-9]+$", "^[0-9]+px$", "a", "^a+$", "^(?:ab|ba)$", "[0-9]")
        ),
    ),
    st.builds(
        lambda name: {"type": "string", "format": name},
        st.sampled_from(("ipv4", "ipv6", "date", "hostname")),
    ),
)


@st.composite
def string_one_ofs(draw: st.DrawFn) -> dict[str, Any]:
    """A oneOf of two or three string branches, now and then the value of a property."""
    schema: dict[str, Any] = {"oneOf": draw(st.lists(_STRING_BRANCHES, min_size=2, max_size=3))}
    if draw(st.booleans()):
        schema["type"] = "string"
    if draw(st.booleans()):
        schema = {"type": "object", "required": ["v"], "properties": {"v": schema}}
    return schema


def _string_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    strings = st.sampled_from(_WORDS) | st.text(alphabet="ab12px.:", max_size=5)
    values = strings | _EACH_TYPE | st.fixed_dictionaries({"v": strings})
    return st.lists(values, min_size=8, max_size=16)


def test_one_ofs_of_strings_apart_written_as_any_of_accept_exactly_what_the_one_of_accepts() -> (
    None
):
    seen = _run(string_one_ofs(), _one_of_outcome, 300, _string_instances)
    assert seen["written, some valid"] >= 30 and seen["kept"] >= 40, seen


# propertyNames beside listed properties, closed or not.
_OBJECT_NAMES = ("a", "ab", "B", "a1", "x")
_NAME_SCHEMAS = st.sampled_from(
    (
        {"pattern": "^[a-z]+$"},
        {"maxLength": 1},
        {"enum": ["a", "ab", "x"]},
        {"const": "a"},
        {"not": {"const": "B"}},
        {"type": "string", "minLength": 2},
    )
)


@st.composite
def property_names_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An object schema listing some names, with propertyNames and often a closing keyword."""
    listed = draw(st.lists(st.sampled_from(_OBJECT_NAMES[:4]), max_size=4, unique=True))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            name: {"type": draw(st.sampled_from(("integer", "string")))} for name in listed
        },
        "propertyNames": draw(_NAME_SCHEMAS),
    }
    extra = draw(st.sampled_from(("absent", "false", "integer", "patterns")))
    if extra == "false":
        schema["additionalProperties"] = False
    elif extra == "integer":
        schema["additionalProperties"] = {"type": "integer"}
    elif extra == "patterns":
        schema.update(additionalProperties=False, patternProperties={"^x": {}})
    if listed and draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(listed), min_size=1, unique=True))
    return schema


def _property_names_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    objects = st.dictionaries(st.sampled_from(_OBJECT_NAMES), st.sampled_from((1, "s")), max_size=3)
    return st.lists(objects | _EACH_TYPE, min_size=8, max_size=16)


def _property_names_outcome(schema: Any, rewritten: Any) -> str:
    return "kept" if rewritten == schema else "written"


def test_property_names_decided_accept_exactly_what_the_schema_accepts() -> None:
    seen = _run(property_names_schemas(), _property_names_outcome, 300, _property_names_instances)
    assert seen["written, some valid"] >= 40 and seen["kept"] >= 40, seen


@st.composite
def nested_discriminated_one_ofs(draw: st.DrawFn) -> dict[str, Any]:
    """A oneOf of branches telling apart a "meta" object by the "kind" it requires,
    with "meta" often left optional (what only narrowing serves)."""
    branches: list[Any] = []
    kinds = draw(st.permutations(_KINDS))
    for index in range(draw(st.integers(2, 3))):
        # Values of its own, or now and then one another branch has too.
        values = [kinds[index], *([kinds[index + 1]] if draw(st.integers(0, 3)) == 0 else [])]
        meta = {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": values}}}
        branch: dict[str, Any] = {"properties": {"meta": meta}}
        if draw(st.integers(0, 3)) > 0:
            branch["required"] = ["meta"]
        if draw(st.booleans()):
            branch["properties"]["n"] = {"type": draw(st.sampled_from(("integer", "string")))}
        branches.append(branch)
    schema: dict[str, Any] = {"oneOf": branches}
    if draw(st.integers(0, 3)) > 0:
        schema["type"] = "object"
    return schema


def _nested_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    metas = st.fixed_dictionaries({}, optional={"kind": st.sampled_from((*_KINDS, 2))})
    objects = st.fixed_dictionaries(
        {}, optional={"meta": metas | _EACH_TYPE, "n": st.sampled_from((1, "x"))}
    )
    return st.lists(st.one_of(objects, _EACH_TYPE), min_size=8, max_size=16)


def test_one_ofs_told_apart_one_level_down_written_as_any_of_accept_exactly_the_same() -> None:
    seen = _run(nested_discriminated_one_ofs(), _one_of_outcome, 200, _nested_instances)
    assert seen["written, some valid"] >= 10 and seen["kept"] >= 40, seen


def _run_narrowed(
    schemas: st.SearchStrategy[Any],
    instances_of: Callable[[Any], st.SearchStrategy[list[Any]]],
    narrowed_only: Callable[[Any, Any], bool] = lambda exact, narrowed: True,
) -> Counter[str]:
    """Check that each drawn schema, narrowed, accepts only what it accepts; count the verdicts.

    ``narrowed_only(exact, narrowed)`` must hold wherever narrowing changed the rewrite.
    """
    seen: Counter[str] = Counter()

    @settings(PROPERTIES, max_examples=300)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        schema = data.draw(schemas, label="schema")
        instances = data.draw(instances_of(schema), label="instances")
        exact, narrowed = rewrite_schema(schema), rewrite_schema(schema, narrow=True)
        if narrowed == exact:
            seen["not narrowed"] += 1
            return
        assert narrowed_only(exact, narrowed), (schema, narrowed)
        seen["narrowed"] += 1
        original, after = verdicts(schema, instances), verdicts(narrowed, instances)
        for instance, was, now in zip(instances, original, after, strict=True):
            assert was is True or now is not True, (schema, narrowed, instance)
            seen["valid refused" if was is True and now is not True else "same"] += 1
            seen["valid kept" if was is True and now is True else "not both valid"] += 1

    check()
    return seen


def test_a_narrowed_one_of_accepts_only_what_the_one_of_accepts() -> None:
    """Narrowing (routing's last resort) may refuse valid values, never accept invalid ones."""
    seen = _run_narrowed(
        st.one_of(discriminated_one_ofs(), nested_discriminated_one_ofs()),
        lambda schema: st.one_of(_discriminated_instances(schema), _nested_instances(schema)),
        # Only a oneOf that the exact rewrites leave is narrowed.
        lambda exact, narrowed: "oneOf" in exact and "oneOf" not in narrowed,
    )
    assert seen["narrowed"] >= 25 and seen["valid refused"] >= 10, seen


_REQUIRABLE = ("a", "b", "c", "d")


@st.composite
def required_name_one_ofs(draw: st.DrawFn) -> dict[str, Any]:
    """A oneOf of open object branches told apart, if at all, by the names each requires."""
    branches: list[Any] = []
    for _ in range(draw(st.integers(2, 3))):
        required = draw(st.lists(st.sampled_from(_REQUIRABLE), min_size=1, max_size=2, unique=True))
        branch: dict[str, Any] = {"required": required}
        typed = draw(st.lists(st.sampled_from(_REQUIRABLE), max_size=2, unique=True))
        if typed:
            kinds = st.sampled_from(("integer", "string"))
            branch["properties"] = {name: {"type": draw(kinds)} for name in typed}
        if draw(st.booleans()):
            branch["type"] = "object"
        branches.append(branch)
    if draw(st.integers(0, 3)) == 0:
        branches.append({"type": "null"})
    schema: dict[str, Any] = {"oneOf": branches}
    if draw(st.booleans()):
        schema["type"] = draw(st.sampled_from(("object", ["object", "null"])))
    if draw(st.integers(0, 3)) == 0:
        schema["required"] = [draw(st.sampled_from(_REQUIRABLE))]
    return schema


def _required_name_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    values = st.sampled_from((1, "x"))
    objects = st.dictionaries(st.sampled_from(_REQUIRABLE), values, max_size=4)
    return st.lists(st.one_of(objects, _EACH_TYPE), min_size=8, max_size=16)


def test_one_ofs_told_apart_by_required_names_narrowed_accept_only_what_the_one_of_accepts() -> (
    None
):
    seen = _run_narrowed(
        required_name_one_ofs(),
        _required_name_instances,
        lambda exact, narrowed: "oneOf" in exact and "oneOf" not in narrowed,
    )
    assert seen["narrowed"] >= 25 and seen["valid kept"] >= 50, seen
    assert seen["valid refused"] >= 5, seen  # narrowing, not an exact rewrite


_ITEM_SCHEMAS = st.sampled_from(
    (True, False, {"type": "integer"}, {"minimum": 2}, {"const": 1}, {"type": "string"})
)


@st.composite
def contains_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A ``contains``, with the node's items, counts and type now and then beside it."""
    schema: dict[str, Any] = {"contains": draw(_ITEM_SCHEMAS)}
    for keyword, values in (
        ("items", _ITEM_SCHEMAS),
        ("minContains", st.integers(0, 3)),
        ("minItems", st.integers(0, 3)),
        ("maxItems", st.integers(0, 5)),
        ("type", st.sampled_from(("array", ["array", "integer"], "object"))),
    ):
        if draw(st.integers(0, 2)) == 0:
            schema[keyword] = draw(values)
    return schema


def _contains_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    items = st.sampled_from((0, 1, 2, 3, "a", None))
    return st.lists(st.lists(items, max_size=6) | _EACH_TYPE, min_size=8, max_size=16)


def test_a_narrowed_contains_accepts_only_what_the_contains_accepts() -> None:
    seen = _run_narrowed(contains_schemas(), _contains_instances)
    assert seen["narrowed"] >= 100 and seen["valid kept"] >= 200, seen


# Unevaluated keywords: what the merge brings next to them, and what it must not move.
_UNEVALUATED_FAMILIES = {
    "unevaluatedProperties": ("type", "properties", "patternProperties", "additionalProperties",
                              "required", "title"),
    "unevaluatedItems": ("type", "prefixItems", "items", "contains", "minItems", "title"),
}  # fmt: skip


@st.composite
def unevaluated_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An unevaluated keyword beside keywords of its family, often an allOf of them too."""
    keyword, family = draw(st.sampled_from(sorted(_UNEVALUATED_FAMILIES.items())))
    unevaluated = st.booleans() | _schemas(depth=2, keywords=("type", "minimum", "maxLength"))
    schema = draw(_schemas(depth=1, keywords=family))
    schema[keyword] = draw(unevaluated)
    if draw(st.integers(0, 3)):
        branches = draw(st.lists(_schemas(depth=1, keywords=family), min_size=1, max_size=3))
        if draw(st.integers(0, 3)) == 0:  # a branch reading its own evaluations
            branches[0][keyword] = draw(unevaluated)
        schema["allOf"] = branches
    if draw(st.integers(0, 4)) == 0:  # an applicator the merge leaves beside it
        schema["anyOf"] = draw(st.lists(_schemas(depth=1, keywords=family), min_size=1, max_size=2))
    return {**schema, "$defs": _DEFINITION}


def _unevaluated_outcome(schema: Any, rewritten: Any) -> str:
    kept = isinstance(rewritten, dict) and rewritten.keys() & set(_UNEVALUATED_FAMILIES)
    return "kept" if kept else "written"


def test_unevaluated_keywords_written_as_adjacent_accept_exactly_what_they_accept() -> None:
    seen = _run(unevaluated_schemas(), _unevaluated_outcome, 300)
    assert seen["written, some valid"] >= 60 and seen["kept"] >= 20, seen


# Bundles: resources named by $id, anchors and dynamic anchors, nested so that
# a relative name resolves against the resource around it, and references
# by name, by anchor and by pointer, some of them to nothing.
_RESOURCE_IDS = ("a.json", "dir/b.json", "c", "https://example.com/other/d.json")
_REFERENCES = (
    "a.json", "dir/b.json", "b.json", "c", "d.json", "#x", "#y", "a.json#x", "c#y",
    "#/$defs/r0", "a.json#/minimum", "#/$defs/r0/$defs/r1", "https://example.com/other/d.json",
)  # fmt: skip


@st.composite
def _resource(draw: st.DrawFn, name: int) -> dict[str, Any]:
    node = draw(_schemas(depth=1, keywords=(*_SCALAR_KEYWORDS, "properties", "items")))
    if draw(st.integers(0, 3)):
        node["$id"] = draw(st.sampled_from(_RESOURCE_IDS))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(("$anchor", "$dynamicAnchor")))
        node[kind] = draw(st.sampled_from(("x", "y")))
    if draw(st.integers(0, 2)) == 0:
        node[draw(st.sampled_from(("$ref", "$dynamicRef")))] = draw(st.sampled_from(_REFERENCES))
    if name == 0 and draw(st.booleans()):
        node["$defs"] = {"r1": draw(_resource(1))}
    return node


@st.composite
def bundled_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An object whose properties refer into a bundle of resources."""
    resources = {f"r{i}": draw(_resource(i)) for i in range(draw(st.integers(1, 3)))}
    reference = st.fixed_dictionaries(
        {draw(st.sampled_from(("$ref", "$dynamicRef"))): st.sampled_from(_REFERENCES)}
    )
    properties = draw(st.dictionaries(st.sampled_from(_NAMES), reference, min_size=1))
    schema: dict[str, Any] = {"type": "object", "properties": properties, "$defs": resources}
    if draw(st.booleans()):
        schema["$id"] = "https://example.com/root/r.json"
    return schema


def _bundle_outcome(schema: Any, rewritten: Any) -> str:
    return "kept" if rewritten is schema else "resolved"


def test_references_resolved_within_the_document_accept_exactly_what_they_accept() -> None:
    seen = _run(bundled_schemas(), _bundle_outcome, 300)
    assert seen["resolved, some valid"] >= 40 and seen["kept"] >= 40, seen


# --- the repository's data --------------------------------------------------------------


def _bench_cases() -> Iterator[tuple[str, Any, list[Any]]]:
    for path in sorted(BENCH.glob("*.json")):
        case = json.loads(path.read_text())
        yield path.name, case["schema"], [test["data"] for test in case["tests"]]


def _suite_cases() -> Iterator[tuple[str, Any, list[Any]]]:
    draft = SUITE / "tests" / "draft2020-12"
    for path in sorted(draft.rglob("*.json")):
        for index, case in enumerate(json.loads(path.read_text())):
            name = f"{path.relative_to(draft).as_posix()}[{index}]"
            yield name, case["schema"], [test["data"] for test in case["tests"]]


# uniqueItems over positions of a few values, and some of values without end.
_FEW_VALUES = st.sampled_from((True, False, None, "a", "b", 1, 1.0, 2))
_POSITIONS = st.one_of(
    st.fixed_dictionaries({"enum": st.lists(_FEW_VALUES, min_size=1, max_size=4)}),
    st.fixed_dictionaries({"const": _FEW_VALUES}),
    st.fixed_dictionaries({"type": st.sampled_from(("boolean", "null", ["boolean", "null"]))}),
    st.fixed_dictionaries(
        {"type": st.just("string"), "enum": st.lists(st.sampled_from(_STRINGS), max_size=3)}
    ),
    st.sampled_from(({"type": "string"}, True, False)),
)


@st.composite
def unique_items_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"uniqueItems": True}
    if draw(st.integers(0, 3)) > 0:
        schema["type"] = "array"
    if draw(st.booleans()):
        schema["prefixItems"] = draw(st.lists(_POSITIONS, min_size=1, max_size=3))
    if draw(st.integers(0, 3)) > 0:
        schema["items"] = draw(_POSITIONS)
    for bound in ("minItems", "maxItems"):
        if draw(st.booleans()):
            schema[bound] = draw(st.integers(0, 4))
    if draw(st.integers(0, 4)) == 0:
        schema["contains"] = {"const": draw(_FEW_VALUES)}
    return schema


def _unique_items_instances(schema: Any) -> st.SearchStrategy[list[Any]]:
    arrays = st.lists(_FEW_VALUES | st.sampled_from(_STRINGS), max_size=5)
    return st.lists(near(schema) | arrays | _EACH_TYPE, min_size=8, max_size=16)


def _unique_items_outcome(schema: Any, rewritten: Any) -> str:
    return "kept" if isinstance(rewritten, dict) and "uniqueItems" in rewritten else "written"


def test_unique_items_written_as_the_arrays_accept_exactly_what_unique_items_accepts() -> None:
    seen = _run(unique_items_schemas(), _unique_items_outcome, 300, _unique_items_instances)
    assert seen["written, some valid"] >= 60 and seen["kept"] >= 30, seen


def test_every_jsonschemabench_schema_the_rewrite_changes_keeps_each_verdict() -> None:
    changed = _changed(_bench_cases())
    assert len(changed["any"]) >= 25, changed  # the sample holds allOf, formats and untyped schemas
    # Draft-04 dependencies (WashingtonPost), nots of everything and of a type (Synthesized).
    assert len(changed["dependencies"]) >= 3 and len(changed["not"]) >= 4, changed
    # A oneOf of required names (Github_easy o6022, WashingtonPost wp_0).
    assert len(changed["oneOf, if"]) >= 2, changed


def test_every_suite_schema_the_rewrite_changes_keeps_each_verdict() -> None:
    changed = _changed(_suite_cases())
    assert len(changed["any"]) >= 100, changed
    # dependentRequired.json, dependentSchemas.json, the optional dependencies-compatibility.json.
    assert len(changed["dependencies"]) >= 13 and len(changed["not"]) >= 5, changed
    # oneOf.json and if-then-else.json, whose branches are bounds, types and required names.
    assert len(changed["oneOf, if"]) >= 14, changed
    # anchor.json, ref.json and dynamicRef.json: bundles whose references name resources.
    assert len(changed["references"]) >= 25, changed


def _changed(cases: Iterator[tuple[str, Any, list[Any]]]) -> dict[str, list[str]]:
    """The cases the rewrite changes (each keeping its verdicts), and those where it wrote out
    a ``not`` or a dependency keyword."""
    changed: dict[str, list[str]] = {
        "any": [],
        "not": [],
        "dependencies": [],
        "oneOf, if": [],
        "references": [],
    }
    for name, schema, instances in cases:
        rewritten = assert_equivalent(schema, instances)
        if rewritten is schema:
            continue
        changed["any"].append(name)
        if _holding(rewritten, ("not",)) < _holding(schema, ("not",)):
            changed["not"].append(name)
        if _holding(rewritten, _DEPENDENCY_KEYWORDS) < _holding(schema, _DEPENDENCY_KEYWORDS):
            changed["dependencies"].append(name)
        if _holding(rewritten, ("oneOf", "if")) < _holding(schema, ("oneOf", "if")):
            changed["oneOf, if"].append(name)
        if _holding(rewritten, _IDENTIFIERS) < _holding(schema, _IDENTIFIERS):
            changed["references"].append(name)
    return changed


def _holding(document: Any, keywords: tuple[str, ...]) -> int:
    """How many of ``keywords`` the schemas in ``document`` hold, draft-07 dependencies included."""
    count = 0
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            count += len(node.keys() & set(keywords))
            pending.extend(child for child, _ in subschemas(node, ""))
            if isinstance(node.get("dependencies"), dict):
                pending.extend(node["dependencies"].values())
    return count


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"items": {"not": {"const": 1}}}},
        {"type": ["array", "string"], "not": {"items": {"not": {"type": "integer"}}}},
        {"type": "string", "not": {"items": {"not": {"const": 1}}}},
        {"type": "array", "minItems": 2, "not": {"items": {"not": True}}},
    ],
)
def test_a_not_of_items_not_is_written_as_contains(schema: dict[str, Any]) -> None:
    instances = [[], [1], [0, 1], [0], ["a"], "a", 1, None, {"a": 1}, [0, 0, 1]]
    rewritten = assert_equivalent(schema, instances)
    assert rewritten is False or "contains" in rewritten or "not" not in rewritten


@pytest.mark.parametrize(
    ("schema", "written"),
    [
        # The test suite's if-then-else.json "non-interference across combined schemas".
        (
            {"allOf": [{"if": {"exclusiveMaximum": 0}}, {"then": {"minimum": -10}}, {"else": {}}]},
            {},
        ),
        (
            {"allOf": [{"type": "integer", "then": {"minimum": 3}}, {"minimum": 1}]},
            {"type": "integer", "minimum": 1},
        ),
        ({"if": {"const": 1}, "type": "string"}, {"type": "string"}),
        # What the if evaluated is read: "a" passes only because the if names it.
        (
            {"if": {"properties": {"a": True}}, "unevaluatedProperties": False},
            {"if": {"properties": {"a": True}}, "unevaluatedProperties": False},
        ),
    ],
)
def test_an_if_then_or_else_alone_is_dropped_where_nothing_reads_it(
    schema: dict[str, Any], written: Any
) -> None:
    instances = [{}, {"a": 1}, {"b": 1}, -20, -5, 0, 1, 2, 4, 1.5, "a", None]
    assert assert_equivalent(schema, instances) == written

"""A client's JSON schema rewritten into an equivalent one the grammar engines enforce.

Some constructs mean something an engine can enforce, written in a way it
cannot: an ``allOf`` (xgrammar reads two branches as "any JSON value"), a
schema without ``type`` whose keywords constrain one type only, a ``format``
that an exact regex can stand for. :func:`rewrite_schema` writes each as the
equivalent schema the engines enforce, and both engines and the analysis of
what they leave unenforced read the rewritten schema:

- first, references that name a schema of the document by an embedded
  ``$id``, an ``$anchor`` or a ``$dynamicRef`` that one anchor settles,
  written as JSON pointers from the root
  (:mod:`~grammar_guard.core.schema.local_references`), so that the steps
  below may move the schemas such a document holds;
- ``allOf`` merged into its parent (:mod:`~grammar_guard.core.schema.all_of_merge`);
- a ``format`` with an exact pattern (:mod:`~grammar_guard.core.schema.formats`)
  written as that ``pattern``: both apply to strings only;
- the simplest ``not``\\ s written as what they leave: ``false`` for a ``not``
  of everything, the types or the finitely many values left, or the values
  of the schema's types outside some named ones
  (:mod:`~grammar_guard.core.schema.negation`);
- a ``oneOf`` whose branches no value satisfies two of, as ``anyOf``
  (:mod:`~grammar_guard.core.schema.exclusive_one_of`);
- an ``enum`` or ``const`` written as the named values that pass the rest of
  its schema, where each is decided
  (:mod:`~grammar_guard.core.schema.named_values`), after the simplest
  ``not``\\ s;
- ``uniqueItems`` over items of a few possible values, in arrays whose
  length is bounded, written as the ``enum`` of the arrays it allows
  (:mod:`~grammar_guard.core.schema.unique_items`), after the named values;
- ``propertyNames`` decided against each listed name: a name it refuses
  leaves ``properties``, and where no other name may be added it is dropped
  (:mod:`~grammar_guard.core.schema.property_names`);
- ``oneOf``, ``not`` and ``if``/``then``/``else`` whose negated parts are
  literals written out as an ``anyOf`` of branches
  (:mod:`~grammar_guard.core.schema.boolean_forms`), after the simplest
  ``not``\\ s;
- ``dependentRequired``, ``dependentSchemas`` and draft-07 ``dependencies``
  written as an ``anyOf`` with a branch per trigger name absent or present
  (:mod:`~grammar_guard.core.schema.dependencies`), after merging, with the
  rest of the schema merged into each branch;
- ``unevaluatedProperties`` and ``unevaluatedItems`` with no in-place
  applicator left as ``additionalProperties`` and ``items``
  (:mod:`~grammar_guard.core.schema.unevaluated`);
- an untyped schema split by type (:mod:`~grammar_guard.core.schema.untyped`),
  after merging, since merged branches often supply the type;
- ECMA-262's ``\\s`` and ``\\S`` in a ``pattern`` or a ``patternProperties`` name
  written as the classes they stand for, Unicode spaces included
  (:mod:`~grammar_guard.core.schema.ecma_whitespace`), and lookaheads at the
  start of one written out as the condition they are
  (:mod:`~grammar_guard.core.schema.pattern_lookaheads`);
- an ``if`` without ``then`` or ``else``, and those without an ``if``,
  dropped: they cannot fail, and would keep an ``allOf`` unmerged;
- a length or count written as a whole float (``"maxItems": 2.0``) written as
  the integer it is, which is all the engines take;
- a boolean ``propertyNames`` or ``prefixItems`` entry written as the
  keywords that say the same, and prefix items past ``maxItems`` dropped
  (:mod:`~grammar_guard.core.schema.boolean_subschemas`).

Every rewrite accepts exactly the values the schema accepts (draft 2020-12,
``format`` read as an assertion and ``dependencies`` as the draft-07
constraint, as the analysis reads them). Where that
cannot be shown, the construct stays as written and is refused or routed as
before. Moving a subschema is only safe where nothing refers into it, so a
schema that a ``$ref`` points inside of is never restructured, and a
document whose references are still not plain local JSON pointers after
the first step (another document's, or one the dynamic scope decides)
only gets its formats rewritten. A schema
with ``unevaluated*`` reads what its in-place applicators evaluated: only
its own ``allOf`` is merged into it (which keeps that), never it into
another schema; with no applicator left it is written as the adjacent
keywords (:mod:`~grammar_guard.core.schema.unevaluated`). In a document
holding one, no ``anyOf`` of branches is written: the branches leave out
keywords that constrain nothing, and may evaluate names it reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from grammar_guard.core.schema.ecma_whitespace import WHITESPACE_MEMBERS
from grammar_guard.core.schema.evaluate import matching_work
from grammar_guard.core.schema.formats import DEFINED_FORMATS, format_max_length, format_pattern
from grammar_guard.core.schema.open_objects import objects_opened
from grammar_guard.core.schema.rewrite_walks import Rewrite

_RULES = (
    "references-as-pointers,boolean-subschemas,named-values-decided,patterns-matched,unique-items-listed,all-of-merged,untyped-split,format-as-pattern,whole-counts,unknown-formats-dropped,"
    "negation:5,dependencies-any-of:3,combinators-any-of:4,unevaluated-as-adjacent,"
    "ecma-whitespace-written,lookaheads-written,lone-conditions-dropped,exclusive-one-of-any-of:4,one-of-narrowed-by-optional-name:2,one-of-narrowed-by-required-names,contains-narrowed:4,property-names-decided,objects-opened-on-request"
)
# Pattern matching for named values (evaluate.py), in automaton state visits
# for the whole document: a few tenths of a second at most.
_MATCH_WORK = 1_000_000
_REMEMBERED_TEXTS = 32


def rewrite_schema(document: Any, *, narrow: bool = False) -> Any:
    """``document``, a parsed JSON schema, with each construct rewritten that can be.

    With ``narrow``, a ``oneOf`` that no exact rewrite serves is narrowed to
    the objects that have a property telling its branches apart
    (:func:`~grammar_guard.core.schema.exclusive_one_of.narrowed_one_of_as_any_of`),
    and a ``contains`` to the arrays with a match among their first items
    (:mod:`~grammar_guard.core.schema.contains_narrowing`): routing asks for
    that only for a schema no engine serves as it is.
    Pure: ``document`` is never changed, and comes back itself when nothing
    was rewritten.
    """
    with matching_work(_MATCH_WORK):
        return Rewrite(document, narrow=narrow).run()


@functools.lru_cache(maxsize=_REMEMBERED_TEXTS)
def rewritten_schema_text(text: str, open_objects: bool = False) -> str:
    """:func:`rewrite_schema` of the schema ``text`` as compact JSON; ``text`` if unchanged.

    With ``open_objects`` (a server's default), the objects and
    tuples the rewritten schema leaves open are said to be
    (:func:`~grammar_guard.core.schema.open_objects.objects_opened`), after
    every other step: those read the schema the client wrote.
    Remembered per text: routing checks a key on both engines, then one of
    them compiles it, and each reads the rewritten schema.
    """
    document = json.loads(text)
    rewritten = rewrite_schema(document)
    if open_objects:
        rewritten = objects_opened(rewritten)
    if rewritten is document:
        return text
    return json.dumps(rewritten, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=_REMEMBERED_TEXTS)
def narrowed_schema_text(text: str) -> str | None:
    """The schema ``text`` rewritten with ``narrow``, as compact JSON; None if no narrower."""
    narrowed = rewrite_schema(json.loads(text), narrow=True)
    written = json.dumps(narrowed, separators=(",", ":"), ensure_ascii=False)
    return None if written == rewritten_schema_text(text) else written


def _version() -> str:
    """The rules, and the format patterns and lengths they write, as one string for fingerprints."""
    digest = hashlib.sha256()
    for name in DEFINED_FORMATS:
        digest.update(f"{name}={format_pattern(name)},{format_max_length(name)}\n".encode())
    digest.update(WHITESPACE_MEMBERS.encode())
    return f"{_RULES}:{digest.hexdigest()[:16]}"


# Goes into each engine's fingerprint: a grammar stored before the rewrite
# changed was compiled from a different schema.
REWRITE_VERSION = _version()

"""Exact regular expressions for JSON-Schema ``format`` values (draft 2020-12).

A schema ``{"type": "string", "format": F}`` can be enforced by either grammar
engine as ``{"type": "string", "pattern": format_pattern(F)}``, with the
``maxLength`` of :data:`FORMAT_MAX_LENGTHS` where it has one: each pattern
here accepts exactly the strings the format's RFC grammar accepts, as the
JSON-Schema-Test-Suite (``tests/draft2020-12/optional/format/<F>.json``) reads
it, but for the over-constraints listed below. Patterns are matched against
the decoded string value and anchored with ``^(?:...)$``, so they mean the
same whether an engine searches or matches.

Each family of formats is written in a module of its own
(:mod:`~grammar_guard.core.schema.format_dates`,
:mod:`~grammar_guard.core.schema.format_email_hostnames`,
:mod:`~grammar_guard.core.schema.format_uris`,
:mod:`~grammar_guard.core.schema.format_ecma_regex`), from the pieces they
share (:mod:`~grammar_guard.core.schema.format_pieces`); this one gathers
them into :data:`FORMAT_PATTERNS`.

Only features both xgrammar and llguidance enforce are used: no lookaround,
backreferences, ``\\b``, inner anchors, ``\\d``, ``\\w`` or ``\\s``; ASCII
ranges are spelled out, and non-ASCII ranges (IRIs, URI templates) are written
as the literal characters rather than ``\\u`` escapes.

Choices where the RFC text leaves room, made the way the test suite reads it:

- ``date``/``time``/``date-time`` (RFC 3339 section 5.6): ``T`` and ``Z`` in
  either case; Feb 29 only in Gregorian leap years; second 60 only as
  ``23:59:60`` with a zero offset (``Z``, ``+00:00``, ``-00:00``), on any
  date, as the suite does not tie leap seconds to a calendar. The RFC also
  allows a leap second in local time (``15:59:60-08:00``); refusing those is
  the one over-constraint here, taken because the exact pattern needs one
  branch per minute of the day (the slowest of all to compile).
- ``duration`` (RFC 3339 appendix A): the designators are ABNF quoted strings,
  so they match in either case, as ``T`` and ``Z`` do.
- ``ipv4`` (RFC 2673 dotted-quad): no leading zeros (``01``), as in RFC 3986's
  ``dec-octet`` and the IPv4 tail of ``ipv6``.
- ``email`` (RFC 5321 ``Mailbox``): the ABNF without the length limits of its
  section 4.5.3; address literals are IPv4 or IPv6 only, the only tags
  registered for RFC 5321's General-address-literal.
- ``uri-template`` (RFC 6570): literals include the apostrophe (erratum to the
  ABNF, which the suite follows); the reserved operators ``=,!@|`` are kept,
  as the ABNF has them.
- ``relative-json-pointer``: draft-handrews-relative-json-pointer-01, the
  version 2020-12 cites (no index manipulation).
- ``hostname`` (RFC 1123 section 2.1): labels of 1-63 letters, digits and
  hyphens, neither first nor last a hyphen; no trailing dot, as the suite
  reads it. The total of 253 characters is no pattern's business: the
  rewrite writes it as ``maxLength`` (:data:`FORMAT_MAX_LENGTHS`). An A-label
  (``xn--...``) is valid only if it decodes (Punycode) to a string that
  passes the IDNA2008 tables and context rules, which no regular expression
  checks, so every label with hyphens in its 3rd and 4th position is
  refused, as RFC 5891 section 4.2.3.1 reserves them: an over-constraint
  (the valid ``xn--zca29lwxobi7a`` is refused, never anything invalid
  accepted). ``email``'s domain is RFC 5321's ``Domain``, which has neither
  rule.

Formats written as a part of themselves, each an over-constraint that
refuses valid values and never accepts an invalid one:

- ``idn-hostname``, ``idn-email``: ASCII only. A U-label or A-label is valid
  only if it decodes (Punycode) to a string that passes the IDNA2008 tables
  and context rules, which no regular expression checks; an ASCII label
  without hyphens in its 3rd and 4th position (RFC 5890's NR-LDH label) is
  valid as it is. So ``idn-hostname`` is ``hostname``, and ``idn-email`` an
  ``email`` whose domain is such a host name.
- ``regex`` (and ``ecmascript-regex.json``, which tests it too): ECMA-262
  patterns nest groups to any depth and name them, which no regular
  expression can check. Written: patterns whose every piece is valid with
  and without the ``u`` flag, groups (capturing or ``(?:``) at most three
  deep, lookarounds holding no group, class ranges between two letters or
  two digits of one run in order, ``{n,m}`` where the order shows in the
  digits; not written: named groups and back-references, ``\\0``, ``\\p{...}``,
  raw control characters. Checked with node's ``RegExp`` on 20,000 strings
  drawn from the pattern (hypothesis), in both modes, when it was written.

Unknown formats are left out: there is nothing to enforce; in 2020-12 they
are annotations, and the rewrite drops them.

Engine notes (unit_tests/core/schema/test_format_patterns.py pins the behaviours):

- xgrammar matches a pattern against the raw JSON text, so it never writes a
  character JSON escapes (``"``, ``\\``, U+0000-U+001F): it refuses the valid
  ``json-pointer`` and ``relative-json-pointer`` values holding one, and every
  quoted ``email`` local part (``"joe bloggs"@example.com``). These are
  over-constraints, never invalid output; the plugin's analysis refuses the
  ``email`` pattern for xgrammar outright (its literal quote). llguidance
  enforces all of them exactly.
- xgrammar 0.2.8 misreads ``(?:b*c)?`` in a JSON-schema pattern (it accepts
  "b"), so optional groups are written ``{0,1}``
  (see :func:`~grammar_guard.core.schema.format_pieces.optional`).
- Compile cost: the simple formats (``date``, ``duration``, ``ipv4``,
  ``uuid``, the JSON pointers) compile fast on both engines; the URI and IRI
  families compile several times slower on xgrammar (the non-ASCII ranges
  next to expressions), still within a quick compile; llguidance's lazy
  lexer compiles every one of them quickly.
- ``hostname`` is served by llguidance alone: xgrammar ignores a
  ``maxLength`` next to a pattern, so the analysis refuses it there (and the
  63-character label bound makes xgrammar's compile slow).
- ``regex`` is served by llguidance alone too (its strings hold backslashes,
  which xgrammar would write raw). Its masks cost more than other strings':
  nearly every token can go on inside such a string, and the lexer has to
  follow each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from grammar_guard.core.schema.format_dates import DATE_TIME, FULL_DATE, FULL_TIME, duration
from grammar_guard.core.schema.format_ecma_regex import regex
from grammar_guard.core.schema.format_email_hostnames import HOSTNAME, IDN_EMAIL, MAILBOX
from grammar_guard.core.schema.format_pieces import HEXDIG, IPV4, IPV6, whole
from grammar_guard.core.schema.format_uris import (
    IRI,
    IRI_REFERENCE,
    JSON_POINTER,
    RELATIVE_JSON_POINTER,
    URI,
    URI_REFERENCE,
    URI_TEMPLATE,
)

# --- the table ----------------------------------------------------------------

# The formats draft 2020-12 defines: those this module may hold a pattern for.
DEFINED_FORMATS = (
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
    "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
    "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex",
)  # fmt: skip

FORMAT_PATTERNS: Mapping[str, str] = MappingProxyType(
    {
        "date": whole(FULL_DATE),
        "time": whole(FULL_TIME),
        "date-time": whole(DATE_TIME),
        "duration": whole(duration()),
        "email": whole(MAILBOX),
        "hostname": whole(HOSTNAME),
        "idn-hostname": whole(HOSTNAME),
        "idn-email": whole(IDN_EMAIL),
        "regex": whole(regex()),
        "ipv4": whole(IPV4),
        "ipv6": whole(IPV6),
        "uuid": whole(f"{HEXDIG}{{8}}(?:-{HEXDIG}{{4}}){{3}}-{HEXDIG}{{12}}"),
        "uri": whole(URI),
        "uri-reference": whole(URI_REFERENCE),
        "iri": whole(IRI),
        "iri-reference": whole(IRI_REFERENCE),
        "uri-template": whole(URI_TEMPLATE),
        "json-pointer": whole(JSON_POINTER),
        "relative-json-pointer": whole(RELATIVE_JSON_POINTER),
    }
)

# The longest string each format allows where its pattern does not say it:
# written as ``maxLength`` next to the pattern (both apply to strings only).
FORMAT_MAX_LENGTHS: Mapping[str, int] = MappingProxyType(
    {
        # RFC 1123 section 2.1 allows 255 octets on the wire, 253 characters as text.
        "hostname": 253,
        "idn-hostname": 253,
    }
)


def format_pattern(name: str) -> str | None:
    """The whole-string pattern that enforces format ``name`` exactly, or None if there is none."""
    return FORMAT_PATTERNS.get(name)


def format_max_length(name: str) -> int | None:
    """The ``maxLength`` that format ``name``'s pattern needs beside it, or None if none."""
    return FORMAT_MAX_LENGTHS.get(name)

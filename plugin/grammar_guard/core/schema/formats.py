"""Exact regular expressions for JSON-Schema ``format`` values (draft 2020-12).

A schema ``{"type": "string", "format": F}`` can be enforced by either grammar
engine as ``{"type": "string", "pattern": format_pattern(F)}``, with the
``maxLength`` of :data:`FORMAT_MAX_LENGTHS` where it has one: each pattern
here accepts exactly the strings the format's RFC grammar accepts, as the
JSON-Schema-Test-Suite (``tests/draft2020-12/optional/format/<F>.json``) reads
it, but for the over-constraints listed below. Patterns are matched against
the decoded string value and anchored with ``^(?:...)$``, so they mean the
same whether an engine searches or matches.

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
  branch per minute of the day (54 kB, the slowest of all to compile).
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

Engine notes (measured; unit_tests/core/schema/test_format_patterns.py pins them):

- xgrammar matches a pattern against the raw JSON text, so it never writes a
  character JSON escapes (``"``, ``\\``, U+0000-U+001F): it refuses the valid
  ``json-pointer`` and ``relative-json-pointer`` values holding one, and every
  quoted ``email`` local part (``"joe bloggs"@example.com``). These are
  over-constraints, never invalid output; the plugin's analysis refuses the
  ``email`` pattern for xgrammar outright (its literal quote). llguidance
  enforces all of them exactly.
- xgrammar 0.2.8 misreads ``(?:b*c)?`` in a JSON-schema pattern (it accepts
  "b"), so optional groups are written ``{0,1}`` (see :func:`_optional`).
- Compile cost, ``{"type": "string", "pattern": P}`` with the 129k-token
  DeepSeek tokenizer, on a busy 2-core machine: under 15 ms on both engines
  for ``date``, ``duration``, ``ipv4``, ``uuid``, ``json-pointer`` and
  ``relative-json-pointer``; ``ipv6`` and ``email`` 25-90 ms on xgrammar.
  Slow on xgrammar: ``uri`` ~80-140 ms, ``uri-reference`` ~100-270 ms,
  ``iri`` ~115-130 ms, ``iri-reference`` ~160-255 ms, ``uri-template``
  ~120 ms (the non-ASCII ranges next to expressions). llguidance takes
  under 10 ms for all of them.
- ``hostname`` is served by llguidance alone: xgrammar ignores a
  ``maxLength`` next to a pattern, so the analysis refuses it there (and the
  63-character label bound makes xgrammar's compile slow). llguidance
  compiles the rewritten schema, pattern and ``maxLength``, in under 20 ms.
- ``regex`` is served by llguidance alone too (its strings hold backslashes,
  which xgrammar would write raw). It compiles in about 15 ms, but a mask
  inside such a string takes about 1.1 ms with the DeepSeek tokenizer, where
  ``uri`` takes 0.2-0.5 ms and a plain string 0.01 ms: nearly every token
  can go on, and the lexer has to follow each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# --- helpers ---------------------------------------------------------------


def _group(*alternatives: str) -> str:
    """A non-capturing group of the alternatives (one alternative is grouped too)."""
    return "(?:" + "|".join(alternatives) + ")"


def _optional(piece: str) -> str:
    # "{0,1}" rather than "?": xgrammar 0.2.8's JSON-schema patterns read
    # "(?:b*c)?" as if the group could stop before its "c" (it accepts "b"),
    # whenever the group starts with a "*" or "+" item; "{0,1}" is read right.
    return _group(piece) + "{0,1}"


def _whole(piece: str) -> str:
    # Grouped first: "^a|b$" would anchor each side of a top-level "|" only once.
    return "^" + _group(piece) + "$"


def _either_case(text: str) -> str:
    """``text`` with each letter in either case, as ABNF quoted strings match (RFC 5234 2.3)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in text)


def _char_range(low: int, high: int) -> str:
    """A class range written with the literal characters, which both engines read as code points."""
    return f"{chr(low)}-{chr(high)}"


def _class_except(excluded: str) -> str:
    """A class of every character from the space up but ``excluded`` (and surrogates).

    Written as the ranges left, not as ``[^...]``: llguidance 1.7 lets a quote
    or backslash through a negated class that names it (the analysis refuses
    such patterns there, see ``regex_scan``). Control characters are left
    out too, an over-constraint: a pattern spells them as escapes (``\\n``).
    """
    ranges: list[tuple[int, int]] = []
    low = 0x20
    for point in sorted({ord(char) for char in excluded} | set(range(0xD800, 0xE000))):
        if point > low:
            ranges.append((low, point - 1))
        low = max(low, point + 1)
    ranges.append((low, 0x10FFFF))
    return (
        "["
        + "".join(_class_end(a) + ("" if a == b else "-" + _class_end(b)) for a, b in ranges)
        + "]"
    )


def _class_end(point: int) -> str:
    char = chr(point)
    return "\\" + char if char in "\\]-^[" else char


# --- shared ABNF pieces (RFC 5234 appendix B, RFC 3986) ----------------------

_HEXDIG = "[0-9A-Fa-f]"  # HEXDIG's "A"-"F" are case-insensitive strings
_PCT_ENCODED = f"%{_HEXDIG}{_HEXDIG}"

# RFC 3986 dec-octet: 0-255 without leading zeros.
_DEC_OCTET = _group("25[0-5]", "2[0-4][0-9]", "1[0-9][0-9]", "[1-9]?[0-9]")
_IPV4 = f"{_DEC_OCTET}(?:\\.{_DEC_OCTET}){{3}}"

_H16 = f"{_HEXDIG}{{1,4}}"
_LS32 = _group(f"{_H16}:{_H16}", _IPV4)


def _ipv6() -> str:
    """RFC 3986 section 3.2.2 ``IPv6address``: eight 16-bit pieces, a run of them elided by "::".

    Each branch fixes what follows "::" (a weight in pieces, ``ls32`` counting
    two) and lets up to ``7 - weight`` pieces come before it, so "::" always
    stands for at least one piece.
    """
    full = f"(?:{_H16}:){{6}}{_LS32}"
    tails = [(f"(?:{_H16}:){{{count}}}{_LS32}", count + 2) for count in range(5, -1, -1)]
    tails += [(_H16, 1), ("", 0)]
    return _group(full, *(_pieces_before(7 - weight) + "::" + tail for tail, weight in tails))


def _pieces_before(most: int) -> str:
    """Up to ``most`` colon-separated pieces ahead of "::"."""
    if most == 0:
        return ""
    if most == 1:
        return _optional(_H16)
    return _optional(f"(?:{_H16}:){{0,{most - 1}}}{_H16}")


_IPV6 = _ipv6()

# --- RFC 3339 dates and times ------------------------------------------------

_YEAR = "[0-9]{4}"
# Two digits that are a multiple of 4: 00-96, and 04-96 without 00.
_MULTIPLE_OF_4 = _group("[02468][048]", "[13579][26]")
_NONZERO_MULTIPLE_OF_4 = _group("0[48]", "[2468][048]", "[13579][26]")
# Divisible by 4 but not by 100 (the last two digits decide), or by 400 (the
# last two are 00 and the first two a multiple of 4).
_LEAP_YEAR = _group("[0-9]{2}" + _NONZERO_MULTIPLE_OF_4, _MULTIPLE_OF_4 + "00")
_MONTH_31 = "(?:0[13578]|1[02])"
_MONTH_30 = "(?:0[469]|11)"
_DAYS_31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAYS_30 = "(?:0[1-9]|[12][0-9]|30)"
_DAYS_28 = "(?:0[1-9]|1[0-9]|2[0-8])"
_FULL_DATE = _group(
    f"{_YEAR}-" + _group(f"{_MONTH_31}-{_DAYS_31}", f"{_MONTH_30}-{_DAYS_30}", f"02-{_DAYS_28}"),
    f"{_LEAP_YEAR}-02-29",
)

_HOUR = "(?:[01][0-9]|2[0-3])"
_MINUTE = "[0-5][0-9]"
_SECFRAC = _optional("\\.[0-9]+")
_UTC = _either_case("z")
_TIME_OFFSET = _group(_UTC, f"[+\\-]{_HOUR}:{_MINUTE}")
_ORDINARY_TIME = f"{_HOUR}:{_MINUTE}:[0-5][0-9]{_SECFRAC}{_TIME_OFFSET}"


# A leap second is valid whenever the time less its offset is 23:59 UTC, but
# written exactly that ties the hh:mm before the fraction to the offset after
# it: one branch per local minute, a 54 kB pattern that compiled slower than
# any other format. Only the UTC spelling is kept (an over-constraint:
# "15:59:60-08:00" is refused, never anything invalid accepted).
_UTC_OFFSET = _group(_UTC, "[+\\-]00:00")
_LEAP_SECOND_TIME = f"23:59:60{_SECFRAC}{_UTC_OFFSET}"


_FULL_TIME = _group(_ORDINARY_TIME, _LEAP_SECOND_TIME)
_DATE_TIME = f"{_FULL_DATE}{_either_case('t')}{_FULL_TIME}"


def _duration() -> str:
    """RFC 3339 appendix A: units in order, at least one, weeks on their own."""
    number = "[0-9]+"

    def unit(letter: str) -> str:
        return number + _either_case(letter)

    second = unit("s")
    minute = unit("m") + _optional(second)
    hour = unit("h") + _optional(minute)
    time = _either_case("t") + _group(hour, minute, second)
    day = unit("d")
    month = unit("m") + _optional(day)
    year = unit("y") + _optional(month)
    date = _group(day, month, year) + _optional(time)
    return _either_case("p") + _group(date, time, unit("w"))


# --- RFC 5321 Mailbox ---------------------------------------------------------

_ATEXT = "[A-Za-z0-9!#$%&'*+\\-/=?^_`{|}~]"  # RFC 5322 atext
_DOT_STRING = f"{_ATEXT}+(?:\\.{_ATEXT}+)*"
# qtextSMTP is printable ASCII but '"' and '\'; quoted-pairSMTP is '\' and any printable.
_QUOTED_STRING = '"(?:[ !#-\\[\\]-~]|\\\\[ -~])*"'
_LET_DIG = "[A-Za-z0-9]"
_SUB_DOMAIN = _LET_DIG + _optional(f"[A-Za-z0-9\\-]*{_LET_DIG}")
_DOMAIN = f"{_SUB_DOMAIN}(?:\\.{_SUB_DOMAIN})*"
# Snum: one to three digits worth 0-255; unlike dec-octet, leading zeros are fine.
_SNUM = _group("25[0-5]", "2[0-4][0-9]", "[01][0-9][0-9]", "[0-9]{1,2}")
_SMTP_IPV4 = f"{_SNUM}(?:\\.{_SNUM}){{3}}"
_IPV6_HEX = _H16


def _hex_run(least: int, most: int) -> str:
    """``least`` (at least one) to ``most`` IPv6-hex pieces joined by ":"."""
    if most == 1:
        return _IPV6_HEX
    more = f"{least - 1}" if least == most else f"{least - 1},{most - 1}"
    return f"{_IPV6_HEX}(?::{_IPV6_HEX}){{{more}}}"


def _smtp_ipv6() -> str:
    """RFC 5321 ``IPv6-addr``: "::" stands for at least two pieces, so fewer explicit ones."""
    full = f"{_IPV6_HEX}(?::{_IPV6_HEX}){{7}}"
    v4_full = f"{_IPV6_HEX}(?::{_IPV6_HEX}){{5}}:{_SMTP_IPV4}"
    # At most six pieces around "::", or four next to a trailing IPv4 address.
    compressed = [
        _head(before) + "::" + (_optional(_hex_run(1, 6 - before)) if before < 6 else "")
        for before in range(7)
    ]
    v4_compressed = [
        _head(before)
        + "::"
        + (_optional(_hex_run(1, 4 - before) + ":") if before < 4 else "")
        + _SMTP_IPV4
        for before in range(5)
    ]
    return _group(full, v4_full, *compressed, *v4_compressed)


def _head(count: int) -> str:
    """Exactly ``count`` pieces ahead of "::"."""
    return _hex_run(count, count) if count else ""


_ADDRESS_LITERAL = "\\[" + _group(_SMTP_IPV4, _either_case("IPv6:") + _smtp_ipv6()) + "\\]"
_MAILBOX = _group(_DOT_STRING, _QUOTED_STRING) + "@" + _group(_DOMAIN, _ADDRESS_LITERAL)

# --- RFC 1123 host names ------------------------------------------------------

_LDH = "[A-Za-z0-9\\-]"


def _host_label() -> str:
    """A label of 1-63 letters, digits and hyphens, with a letter or digit at each end.

    A label with hyphens in both its 3rd and 4th position is refused: RFC 5891
    section 4.2.3.1 reserves those, and an A-label (``xn--``) among them is
    valid only if it decodes, which no regular expression checks. Up to four
    characters such a label would end in a hyphen anyway; from five on, the
    3rd and 4th are any pair but "--".
    """
    short = f"{_LDH}{{0,2}}{_LET_DIG}"  # 2-4 characters with the first
    not_reserved = _group(f"{_LET_DIG}{_LDH}", f"\\-{_LET_DIG}")
    long = f"{_LDH}{not_reserved}{_LDH}{{0,58}}{_LET_DIG}"  # 5-63
    return _LET_DIG + _optional(_group(short, long))


_HOST_LABEL = _host_label()
# At most 253 characters in all, which FORMAT_MAX_LENGTHS adds as maxLength.
_HOSTNAME = f"{_HOST_LABEL}(?:\\.{_HOST_LABEL})*"

# --- internationalized names, ASCII only ------------------------------------


# IDNA2008 (RFC 5890 section 2.3.1) calls an ASCII label without hyphens in
# its 3rd and 4th position an NR-LDH label: valid in an IDN host name as it
# is, so every value of _HOSTNAME is a valid idn-hostname, and a mailbox on
# such a domain (RFC 6531 extends RFC 5321's ASCII grammar) a valid idn-email.
_IDN_EMAIL = _group(_DOT_STRING, _QUOTED_STRING) + "@" + _group(_HOSTNAME, _ADDRESS_LITERAL)

# --- ECMA-262 patterns, a regular part of them -----------------------------

# Valid in both ECMA-262 grammars (with and without the "u" flag): the
# escapes of a syntax character or "/", the class escapes, the control
# escapes, \cX, \xHH and \uHHHH.
_REGEX_SYNTAX = "[\\^$\\\\.*+?()\\[\\]{}|/]"
_REGEX_ESCAPE_TAIL = _group(
    "[dDsSwWfnrtv]", _REGEX_SYNTAX, "c[A-Za-z]", f"x{_HEXDIG}{{2}}", f"u{_HEXDIG}{{4}}"
)
_REGEX_ESCAPE = "\\\\" + _REGEX_ESCAPE_TAIL
# In a class "\b" is a backspace and "\-" a hyphen; range ends are letters or
# digits of one run, in order ("z-a" is an error, and so is "\d-z" with "u").
_CLASS_ATOM = _group(_class_except("\\]-"), "\\\\" + _group(_REGEX_ESCAPE_TAIL, "[b\\-]"))
_CLASS_RANGE = _group(
    *(
        f"{first}\\-[{first}-{run[-1]}]"
        for run in ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        for first in run
    )
)
# A hyphen of its own only first or last, where no grammar reads a range.
_REGEX_CLASS = "\\[\\^{0,1}\\-{0,1}" + _group(_CLASS_RANGE, _CLASS_ATOM) + "*\\-{0,1}\\]"
_ORDERED_COUNTS = _group(*(f"{low},[{low}-9]" for low in range(10)), "[0-9],[1-9][0-9]{1,3}")
_QUANTIFIER = _group("[*+?]", "\\{" + _group("[0-9]{1,4},{0,1}", _ORDERED_COUNTS) + "\\}")
_REGEX_ATOM = _group(_class_except("\\^$.*+?()[]{}|"), "\\.", _REGEX_ESCAPE, _REGEX_CLASS)
_REGEX_ASSERTION = _group("\\^", "\\$", "\\\\[bB]")
_REGEX_GROUP_DEPTH = 3


def _regex() -> str:
    """ECMA-262 ``Pattern``s with groups nested at most ``_REGEX_GROUP_DEPTH`` deep.

    A disjunction is written as terms and bars in any order: the same strings
    as alternatives of terms, with each level written once (alternatives
    spelled out would double the pattern at every level). A lookaround holds
    no group, as lookarounds are never quantified and so need a term of their
    own at each level.
    """

    def disjunction(term: str) -> str:
        return _group(term, "\\|") + "*"

    def quantified(atom: str) -> str:
        return atom + _optional(_QUANTIFIER + "\\?{0,1}")

    flat = disjunction(_group(_REGEX_ASSERTION, quantified(_REGEX_ATOM)))
    lookaround = "\\(\\?<{0,1}[=!]" + flat + "\\)"
    nested = flat
    for _ in range(_REGEX_GROUP_DEPTH):
        group = "\\(" + _optional("\\?:") + nested + "\\)"
        nested = disjunction(
            _group(_REGEX_ASSERTION, lookaround, quantified(_group(_REGEX_ATOM, group)))
        )
    return nested


# --- RFC 3986 URIs and RFC 3987 IRIs ------------------------------------------

_UNRESERVED = "A-Za-z0-9\\-._~"  # class bodies, joined into classes below
_SUB_DELIMS = "!$&'()*+,;="
# RFC 3987 ucschar and iprivate, by code point.
_UCSCHAR = "".join(
    _char_range(low, high)
    for low, high in [
        (0xA0, 0xD7FF),
        (0xF900, 0xFDCF),
        (0xFDF0, 0xFFEF),
        *((plane, plane + 0xFFFD) for plane in range(0x10000, 0xE0000, 0x10000)),
        (0xE1000, 0xEFFFD),
    ]
)
_IPRIVATE = "".join(
    _char_range(low, high)
    for low, high in [(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]
)
_SCHEME = "[A-Za-z][A-Za-z0-9+\\-.]*"
# IP-literal is ASCII in IRIs too; the "v" of IPvFuture is a case-insensitive string.
_IP_LITERAL = (
    "\\[" + _group(_IPV6, f"{_either_case('v')}{_HEXDIG}+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+") + "\\]"
)


def _chars(body: str) -> str:
    """One character of the class ``body`` or a percent-encoded octet."""
    return _group(f"[{body}]", _PCT_ENCODED)


def _uri_grammar(unreserved: str, private: str) -> tuple[str, str]:
    """RFC 3986's ``URI`` and ``URI-reference`` over an ``unreserved`` class body.

    With RFC 3987's ``iunreserved`` and ``iprivate`` they are ``IRI`` and
    ``IRI-reference``. ``IPv4address`` is left out of ``host``: ``reg-name``
    already holds every string it does.
    """
    pchar = _chars(f"{unreserved}{_SUB_DELIMS}:@")
    segment = f"{pchar}*"
    segment_nz = f"{pchar}+"
    segment_nz_nc = _chars(f"{unreserved}{_SUB_DELIMS}@") + "+"
    path_abempty = f"(?:/{segment})*"
    path_absolute = "/" + _optional(f"{segment_nz}(?:/{segment})*")
    path_rootless = f"{segment_nz}(?:/{segment})*"
    path_noscheme = f"{segment_nz_nc}(?:/{segment})*"
    userinfo = _chars(f"{unreserved}{_SUB_DELIMS}:") + "*"
    reg_name = _chars(f"{unreserved}{_SUB_DELIMS}") + "*"
    authority = _optional(userinfo + "@") + _group(_IP_LITERAL, reg_name) + _optional(":[0-9]*")
    query = _chars(f"{unreserved}{_SUB_DELIMS}:@/?{private}") + "*"
    fragment = _chars(f"{unreserved}{_SUB_DELIMS}:@/?") + "*"
    tail = _optional(f"\\?{query}") + _optional(f"#{fragment}")
    network_path = f"//{authority}{path_abempty}"
    scheme = f"{_SCHEME}:"
    # path-empty is the empty alternative each optional group allows.
    absolute = scheme + _optional(_group(network_path, path_absolute, path_rootless)) + tail
    # URI / relative-ref, with the authority (IPv6 and all) and the tail written once:
    # only a rootless path needs the scheme, and a first segment without ":" lacks it.
    reference = (
        _group(
            _optional(scheme) + _optional(_group(network_path, path_absolute)),
            scheme + path_rootless,
            path_noscheme,
        )
        + tail
    )
    return absolute, reference


_URI, _URI_REFERENCE = _uri_grammar(_UNRESERVED, "")
_IRI, _IRI_REFERENCE = _uri_grammar(_UNRESERVED + _UCSCHAR, _IPRIVATE)

# --- RFC 6570 URI templates ---------------------------------------------------

# literals: printable ASCII but space, '"', '%', '<', '>', '\', '^', '`', '{', '|', '}'.
_TEMPLATE_LITERAL = _chars("!#$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~" + _UCSCHAR + _IPRIVATE)
_VARCHAR = _chars("A-Za-z0-9_")
_VARSPEC = f"{_VARCHAR}(?:\\.?{_VARCHAR})*" + _optional(_group(":[1-9][0-9]{0,3}", "\\*"))
_EXPRESSION = f"\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}}"
_URI_TEMPLATE = _group(_TEMPLATE_LITERAL, _EXPRESSION) + "*"

# --- RFC 6901 JSON pointers ---------------------------------------------------

# Any character but "/" and "~", or "~0" / "~1".
_REFERENCE_TOKEN = "(?:[^/~]|~[01])*"
_JSON_POINTER = f"(?:/{_REFERENCE_TOKEN})*"
_RELATIVE_JSON_POINTER = "(?:0|[1-9][0-9]*)" + _group("#", _JSON_POINTER)

# --- the table ----------------------------------------------------------------

FORMAT_PATTERNS: Mapping[str, str] = MappingProxyType(
    {
        "date": _whole(_FULL_DATE),
        "time": _whole(_FULL_TIME),
        "date-time": _whole(_DATE_TIME),
        "duration": _whole(_duration()),
        "email": _whole(_MAILBOX),
        "hostname": _whole(_HOSTNAME),
        "idn-hostname": _whole(_HOSTNAME),
        "idn-email": _whole(_IDN_EMAIL),
        "regex": _whole(_regex()),
        "ipv4": _whole(_IPV4),
        "ipv6": _whole(_IPV6),
        "uuid": _whole(f"{_HEXDIG}{{8}}(?:-{_HEXDIG}{{4}}){{3}}-{_HEXDIG}{{12}}"),
        "uri": _whole(_URI),
        "uri-reference": _whole(_URI_REFERENCE),
        "iri": _whole(_IRI),
        "iri-reference": _whole(_IRI_REFERENCE),
        "uri-template": _whole(_URI_TEMPLATE),
        "json-pointer": _whole(_JSON_POINTER),
        "relative-json-pointer": _whole(_RELATIVE_JSON_POINTER),
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

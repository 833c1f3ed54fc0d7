"""The pieces several format patterns are built from.

Helpers that write regex pieces both engines read alike (a non-capturing
group, an optional group written ``{0,1}``, a whole-string anchor, letters
in either case, a class spelled as the ranges it leaves), and the ABNF rules
more than one format reads: RFC 5234's ``HEXDIG``, RFC 3986's
``pct-encoded``, ``IPv4address`` and ``IPv6address``. Each format's own
grammar has a module of its own, which :mod:`~grammar_guard.core.schema.formats`
gathers into its table; this one holds what they share.
"""

from __future__ import annotations

# --- helpers ---------------------------------------------------------------


def grouped(*alternatives: str) -> str:
    """A non-capturing group of the alternatives (one alternative is grouped too)."""
    return "(?:" + "|".join(alternatives) + ")"


def optional(piece: str) -> str:
    # "{0,1}" rather than "?": xgrammar 0.2.8's JSON-schema patterns read
    # "(?:b*c)?" as if the group could stop before its "c" (it accepts "b"),
    # whenever the group starts with a "*" or "+" item; "{0,1}" is read right.
    return grouped(piece) + "{0,1}"


def whole(piece: str) -> str:
    # Grouped first: "^a|b$" would anchor each side of a top-level "|" only once.
    return "^" + grouped(piece) + "$"


def either_case(text: str) -> str:
    """``text`` with each letter in either case, as ABNF quoted strings match (RFC 5234 2.3)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in text)


def char_range(low: int, high: int) -> str:
    """A class range written with the literal characters, which both engines read as code points."""
    return f"{chr(low)}-{chr(high)}"


def class_except(excluded: str) -> str:
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

HEXDIG = "[0-9A-Fa-f]"  # HEXDIG's "A"-"F" are case-insensitive strings
PCT_ENCODED = f"%{HEXDIG}{HEXDIG}"

# RFC 3986 dec-octet: 0-255 without leading zeros.
_DEC_OCTET = grouped("25[0-5]", "2[0-4][0-9]", "1[0-9][0-9]", "[1-9]?[0-9]")
IPV4 = f"{_DEC_OCTET}(?:\\.{_DEC_OCTET}){{3}}"

H16 = f"{HEXDIG}{{1,4}}"
_LS32 = grouped(f"{H16}:{H16}", IPV4)


def _ipv6() -> str:
    """RFC 3986 section 3.2.2 ``IPv6address``: eight 16-bit pieces, a run of them elided by "::".

    Each branch fixes what follows "::" (a weight in pieces, ``ls32`` counting
    two) and lets up to ``7 - weight`` pieces come before it, so "::" always
    stands for at least one piece.
    """
    full = f"(?:{H16}:){{6}}{_LS32}"
    tails = [(f"(?:{H16}:){{{count}}}{_LS32}", count + 2) for count in range(5, -1, -1)]
    tails += [(H16, 1), ("", 0)]
    return grouped(full, *(_pieces_before(7 - weight) + "::" + tail for tail, weight in tails))


def _pieces_before(most: int) -> str:
    """Up to ``most`` colon-separated pieces ahead of "::"."""
    if most == 0:
        return ""
    if most == 1:
        return optional(H16)
    return optional(f"(?:{H16}:){{0,{most - 1}}}{H16}")


IPV6 = _ipv6()

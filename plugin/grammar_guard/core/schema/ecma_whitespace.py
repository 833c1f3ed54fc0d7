"""ECMA-262's ``\\s`` and ``\\S`` in a schema ``pattern``, written as the classes they stand for.

ECMA-262 reads ``\\s`` as its WhiteSpace and LineTerminator characters,
Unicode spaces and the byte order mark included; both engines read it as
ASCII whitespace (llguidance's, Rust's, also lacks U+FEFF). A pattern with
``\\S`` then lets a no-break space through, and is refused; one with ``\\s``
refuses valid strings. Written out as explicit classes, both mean what
ECMA-262 means: llguidance enforces them exactly, and xgrammar, which keeps
the tab and line feed of a class out (it would write them raw), refuses
only valid strings, so routing prefers llguidance for them
(:func:`~grammar_guard.core.engines.xgrammar.cost.xgrammar_over_constrains`).

The scan is linear and reads only what it must: escapes, and where a
character class starts and ends. A pattern it cannot write out exactly is
left as it is (and refused where it was): ``\\S`` inside a class (a class
cannot subtract), ``\\s`` at either end of a class range (``[\\s-x]`` is
three members in ECMA-262, a range once written out), and the ECMA-only
empty classes ``[]`` and ``[^]``, which other dialects read differently.
"""

from __future__ import annotations

# ECMA-262 WhiteSpace (TAB, VT, FF, ZWNBSP and the Space_Separator category)
# and LineTerminator (LF, CR, LS, PS), as escapes every engine reads.
WHITESPACE_MEMBERS = (
    "\\t\\n\\x0b\\f\\r\\x20\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
)


# Each escape written out is about 80 characters: past this many in one
# pattern it stays as written, so the schema an engine gets stays in
# proportion to the one the client sent.
MAX_WRITTEN = 64


def whitespace_written_out(pattern: str) -> str | None:
    """``pattern`` with ``\\s`` and ``\\S`` as explicit classes; None if it holds none or cannot."""
    out: list[str] = []
    position, end = 0, len(pattern)
    in_class = False
    written = 0
    while position < end:
        char = pattern[position]
        if char == "\\" and position + 1 < end:
            escaped = pattern[position + 1]
            if escaped not in "sS":
                out.append(pattern[position : position + 2])
                position += 2
                continue
            if not in_class:
                out.append(f"[{'^' if escaped == 'S' else ''}{WHITESPACE_MEMBERS}]")
            elif escaped == "S" or _in_range(pattern, position):
                return None
            else:
                out.append(WHITESPACE_MEMBERS)
            written += 1
            if written > MAX_WRITTEN:
                return None
            position += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            if pattern.startswith(("]", "^]"), position + 1):
                return None
            in_class = True
        out.append(char)
        position += 1
    return "".join(out) if written else None


def _in_range(pattern: str, position: int) -> bool:
    """Whether the class escape at ``position`` may be an end of a range: a ``-`` beside it."""
    before = pattern[position - 1] if position else ""
    after = pattern[position + 2 : position + 4]
    return before == "-" or (after.startswith("-") and after != "-]")

"""How many alternatives the widest alternation of a Lark grammar's rules has.

llguidance parses a grammar's rules with an Earley parser whose rows hold
at most ``LLParserLimits.max_items_in_row`` items (2,000 by default), and
predicting an alternation adds one item per alternative to a row. So a rule
(or a group in one) of 2,000 alternatives or more compiles, and then fails
at the first token that reaches it, after a compile of seconds for a large
grammar. Terminals (upper-case names) are lexed, not parsed: their
alternations cost nothing in a row and are not counted.

The scan is one pass of one regular expression over the text, so linear in
its length, and needs no grammar library.
"""

from __future__ import annotations

import re

# The tokens that matter, in the order they are tried at each position:
# comments and directives (to the end of the line), string and regex
# literals (their ``|`` and brackets are not the grammar's), the start of a
# definition (a name and ``:`` at the start of a line), brackets and ``|``.
# A literal left open runs to the end of its line, and its loop never gives
# back what it took: a line of escaped quotes is read once, not once from
# each quote.
_TOKENS = re.compile(
    r"""
    (?P<skip> //[^\n]* | ^%[^\n]* )
  | (?P<literal> "(?:[^"\\\n]|\\.)*+(?:"|\\?$) | /(?:[^/\\\n]|\\.)++(?:/|\\?$) )
  | (?P<definition> ^[?!]?(?P<name>[A-Za-z_]\w*)(?:\.-?\d+)?[ \t]*: )
  | (?P<open> [(\[] )
  | (?P<close> [)\]] )
  | (?P<bar> \| )
    """,
    re.MULTILINE | re.VERBOSE,
)


def widest_rule_alternation(lark: str) -> int:
    """The most alternatives of one alternation (a rule's body or a group) in ``lark``'s rules."""
    widest = 0
    counts = [1]  # alternatives so far of each alternation still open, outermost first
    in_rule = False
    for token in _TOKENS.finditer(lark):
        kind = token.lastgroup
        if kind == "definition":
            if in_rule:
                widest = max(widest, *counts)
            counts = [1]
            in_rule = not token.group("name").lstrip("_")[:1].isupper()
        elif kind == "open":
            counts.append(1)
        elif kind == "close" and len(counts) > 1:
            closed = counts.pop()
            if in_rule:
                widest = max(widest, closed)
        elif kind == "bar":
            counts[-1] += 1
    return max(widest, *counts) if in_rule else widest

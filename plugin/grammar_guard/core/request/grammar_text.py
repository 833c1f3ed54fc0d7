"""How a request's grammar text is read, the same whichever engine compiles it.

Both engines take Lark and EBNF (GBNF) grammars and must agree on which of
the two a text is, or one request would mean two grammars. This module
imports no grammar library, so either engine loads it without the other.
"""

from __future__ import annotations

import re

# An EBNF rule definition: a rule name at the start of a line, then "::=".
_EBNF_RULE = re.compile(r"^\s*[A-Za-z_][\w.-]*\s*::=")
_GRAMMAR_COMMENT = re.compile(r"(#|//).*$")
# A quoted literal (a string, or a Regex("...") argument) or a character
# class of printed EBNF. Both are matched, not only classes, so that text
# inside a literal is never read as a class, nor a quote inside a class
# (printed \") as the start of a literal.
EBNF_LITERAL_OR_CLASS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


def grammar_is_lark(text: str) -> bool:
    """EBNF (GBNF) rules are written ``name ::= ...``; anything else is read as Lark."""
    return not any(_EBNF_RULE.match(_GRAMMAR_COMMENT.sub("", line)) for line in text.splitlines())

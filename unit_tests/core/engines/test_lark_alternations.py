"""The widest alternation of a Lark grammar's rules, as llguidance's parser rows would hold it."""

from __future__ import annotations

import pytest

from grammar_guard.core.engines.llguidance.lark_alternations import widest_rule_alternation


@pytest.mark.parametrize(
    ("lark", "widest"),
    [
        ('start: "a"', 1),
        ('start: "a" | "b" | "c"', 3),
        # Continuation lines belong to the rule above them.
        ('start: "a"\n     | "b"\n     | "c"\nother: "x" | "y"', 3),
        # A group counts on its own, and so does the body around it.
        ('start: "a" ("b" | "c" | "d" | "e") | "f"', 4),
        ('start: "a" ["b" | "c" | "d"]', 3),
        # Terminals are lexed: their alternatives never fill a parser row.
        ('start: W\nW: "a" | "b" | "c" | "d"', 1),
        ('start: w\n_W.2: "a" | "b" | "c"\nw: "x" | "y"', 2),
        # Priorities and the ? and ! prefixes still start a rule.
        ('?start.2: "a" | "b"\n!other: ("x" | "y" | "z")', 3),
        # Bars and brackets in literals, comments and directives are not the grammar's.
        ('start: "|" "(" /a|b|c|(d)/ // | | |\n%ignore " " | "\\t"', 1),
        ('start: "\\"|" | "b"', 2),
        # A literal left open ends with its line.
        ('start: "a | b\nother: "c" | "d"', 2),
        ('start: /a|b\nother: "c" | "d" | "e"', 3),
        ("", 0),
    ],
)
def test_the_widest_alternation_is_counted_in_rules_only(lark: str, widest: int) -> None:
    assert widest_rule_alternation(lark) == widest


def test_fifty_thousand_alternatives_are_counted() -> None:
    lark = "start: " + "\n     | ".join(f'"w{number}"' for number in range(50_000))
    assert widest_rule_alternation(lark) == 50_000


def test_a_line_of_escaped_quotes_is_read_once() -> None:
    # Read again from each quote, 200,000 of them took minutes (quadratic).
    assert widest_rule_alternation('start: "' + '\\"' * 200_000) == 1
    assert widest_rule_alternation("start: /" + "\\/" * 200_000) == 1

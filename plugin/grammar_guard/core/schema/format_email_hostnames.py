"""RFC 5321 mailboxes and RFC 1123 host names, and their IDN forms, as exact patterns.

The ``email``, ``hostname``, ``idn-hostname`` and ``idn-email`` entries of
:data:`~grammar_guard.core.schema.formats.FORMAT_PATTERNS`: a mailbox's
domain, its address literals (IPv4 and IPv6 in RFC 5321's own spelling), a
host name's labels, and the ASCII part of the internationalized forms
(why only that: the docstring of :mod:`~grammar_guard.core.schema.formats`).
Kept together because ``idn-email`` joins a mailbox to a host name.
"""

from __future__ import annotations

from grammar_guard.core.schema.format_pieces import H16, either_case, grouped, optional

# --- RFC 5321 Mailbox ---------------------------------------------------------

_ATEXT = "[A-Za-z0-9!#$%&'*+\\-/=?^_`{|}~]"  # RFC 5322 atext
_DOT_STRING = f"{_ATEXT}+(?:\\.{_ATEXT}+)*"
# qtextSMTP is printable ASCII but '"' and '\'; quoted-pairSMTP is '\' and any printable.
_QUOTED_STRING = '"(?:[ !#-\\[\\]-~]|\\\\[ -~])*"'
_LET_DIG = "[A-Za-z0-9]"
_SUB_DOMAIN = _LET_DIG + optional(f"[A-Za-z0-9\\-]*{_LET_DIG}")
_DOMAIN = f"{_SUB_DOMAIN}(?:\\.{_SUB_DOMAIN})*"
# Snum: one to three digits worth 0-255; unlike dec-octet, leading zeros are fine.
_SNUM = grouped("25[0-5]", "2[0-4][0-9]", "[01][0-9][0-9]", "[0-9]{1,2}")
_SMTP_IPV4 = f"{_SNUM}(?:\\.{_SNUM}){{3}}"
_IPV6_HEX = H16


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
        _head(before) + "::" + (optional(_hex_run(1, 6 - before)) if before < 6 else "")
        for before in range(7)
    ]
    v4_compressed = [
        _head(before)
        + "::"
        + (optional(_hex_run(1, 4 - before) + ":") if before < 4 else "")
        + _SMTP_IPV4
        for before in range(5)
    ]
    return grouped(full, v4_full, *compressed, *v4_compressed)


def _head(count: int) -> str:
    """Exactly ``count`` pieces ahead of "::"."""
    return _hex_run(count, count) if count else ""


_ADDRESS_LITERAL = "\\[" + grouped(_SMTP_IPV4, either_case("IPv6:") + _smtp_ipv6()) + "\\]"
MAILBOX = grouped(_DOT_STRING, _QUOTED_STRING) + "@" + grouped(_DOMAIN, _ADDRESS_LITERAL)

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
    not_reserved = grouped(f"{_LET_DIG}{_LDH}", f"\\-{_LET_DIG}")
    long = f"{_LDH}{not_reserved}{_LDH}{{0,58}}{_LET_DIG}"  # 5-63
    return _LET_DIG + optional(grouped(short, long))


_HOST_LABEL = _host_label()
# At most 253 characters in all, which FORMAT_MAX_LENGTHS adds as maxLength.
HOSTNAME = f"{_HOST_LABEL}(?:\\.{_HOST_LABEL})*"

# --- internationalized names, ASCII only ------------------------------------


# IDNA2008 (RFC 5890 section 2.3.1) calls an ASCII label without hyphens in
# its 3rd and 4th position an NR-LDH label: valid in an IDN host name as it
# is, so every value of HOSTNAME is a valid idn-hostname, and a mailbox on
# such a domain (RFC 6531 extends RFC 5321's ASCII grammar) a valid idn-email.
IDN_EMAIL = grouped(_DOT_STRING, _QUOTED_STRING) + "@" + grouped(HOSTNAME, _ADDRESS_LITERAL)

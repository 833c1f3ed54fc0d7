"""URIs, IRIs, URI templates and JSON pointers, as exact patterns.

The ``uri``, ``uri-reference``, ``iri``, ``iri-reference``, ``uri-template``,
``json-pointer`` and ``relative-json-pointer`` entries of
:data:`~grammar_guard.core.schema.formats.FORMAT_PATTERNS`: RFC 3986's
grammar, written once over a class of unreserved characters that RFC 3987
widens for IRIs, RFC 6570's templates over the same characters, and
RFC 6901's pointers (the fragments of such references). Kept together as
the grammars of references to resources.
"""

from __future__ import annotations

from grammar_guard.core.schema.format_pieces import (
    HEXDIG,
    IPV6,
    PCT_ENCODED,
    char_range,
    either_case,
    grouped,
    optional,
)

# --- RFC 3986 URIs and RFC 3987 IRIs ------------------------------------------

_UNRESERVED = "A-Za-z0-9\\-._~"  # class bodies, joined into classes below
_SUB_DELIMS = "!$&'()*+,;="
# RFC 3987 ucschar and iprivate, by code point.
_UCSCHAR = "".join(
    char_range(low, high)
    for low, high in [
        (0xA0, 0xD7FF),
        (0xF900, 0xFDCF),
        (0xFDF0, 0xFFEF),
        *((plane, plane + 0xFFFD) for plane in range(0x10000, 0xE0000, 0x10000)),
        (0xE1000, 0xEFFFD),
    ]
)
_IPRIVATE = "".join(
    char_range(low, high)
    for low, high in [(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]
)
_SCHEME = "[A-Za-z][A-Za-z0-9+\\-.]*"
# IP-literal is ASCII in IRIs too; the "v" of IPvFuture is a case-insensitive string.
_IP_LITERAL = (
    "\\[" + grouped(IPV6, f"{either_case('v')}{HEXDIG}+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+") + "\\]"
)


def _chars(body: str) -> str:
    """One character of the class ``body`` or a percent-encoded octet."""
    return grouped(f"[{body}]", PCT_ENCODED)


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
    path_absolute = "/" + optional(f"{segment_nz}(?:/{segment})*")
    path_rootless = f"{segment_nz}(?:/{segment})*"
    path_noscheme = f"{segment_nz_nc}(?:/{segment})*"
    userinfo = _chars(f"{unreserved}{_SUB_DELIMS}:") + "*"
    reg_name = _chars(f"{unreserved}{_SUB_DELIMS}") + "*"
    authority = optional(userinfo + "@") + grouped(_IP_LITERAL, reg_name) + optional(":[0-9]*")
    query = _chars(f"{unreserved}{_SUB_DELIMS}:@/?{private}") + "*"
    fragment = _chars(f"{unreserved}{_SUB_DELIMS}:@/?") + "*"
    tail = optional(f"\\?{query}") + optional(f"#{fragment}")
    network_path = f"//{authority}{path_abempty}"
    scheme = f"{_SCHEME}:"
    # path-empty is the empty alternative each optional group allows.
    absolute = scheme + optional(grouped(network_path, path_absolute, path_rootless)) + tail
    # URI / relative-ref, with the authority (IPv6 and all) and the tail written once:
    # only a rootless path needs the scheme, and a first segment without ":" lacks it.
    reference = (
        grouped(
            optional(scheme) + optional(grouped(network_path, path_absolute)),
            scheme + path_rootless,
            path_noscheme,
        )
        + tail
    )
    return absolute, reference


URI, URI_REFERENCE = _uri_grammar(_UNRESERVED, "")
IRI, IRI_REFERENCE = _uri_grammar(_UNRESERVED + _UCSCHAR, _IPRIVATE)

# --- RFC 6570 URI templates ---------------------------------------------------

# literals: printable ASCII but space, '"', '%', '<', '>', '\', '^', '`', '{', '|', '}'.
_TEMPLATE_LITERAL = _chars("!#$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~" + _UCSCHAR + _IPRIVATE)
_VARCHAR = _chars("A-Za-z0-9_")
_VARSPEC = f"{_VARCHAR}(?:\\.?{_VARCHAR})*" + optional(grouped(":[1-9][0-9]{0,3}", "\\*"))
_EXPRESSION = f"\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}}"
URI_TEMPLATE = grouped(_TEMPLATE_LITERAL, _EXPRESSION) + "*"

# --- RFC 6901 JSON pointers ---------------------------------------------------

# Any character but "/" and "~", or "~0" / "~1".
_REFERENCE_TOKEN = "(?:[^/~]|~[01])*"
JSON_POINTER = f"(?:/{_REFERENCE_TOKEN})*"
RELATIVE_JSON_POINTER = "(?:0|[1-9][0-9]*)" + grouped("#", JSON_POINTER)

"""RFC 3339 dates, times, date-times and durations, as exact patterns.

The ``date``, ``time``, ``date-time`` and ``duration`` entries of
:data:`~grammar_guard.core.schema.formats.FORMAT_PATTERNS`, whose docstring
says how they read the RFC (leap years, leap seconds, either case). One
RFC's grammar, in a module of its own as each format family is.
"""

from __future__ import annotations

from grammar_guard.core.schema.format_pieces import either_case, grouped, optional

# --- RFC 3339 dates and times ------------------------------------------------

_YEAR = "[0-9]{4}"
# Two digits that are a multiple of 4: 00-96, and 04-96 without 00.
_MULTIPLE_OF_4 = grouped("[02468][048]", "[13579][26]")
_NONZERO_MULTIPLE_OF_4 = grouped("0[48]", "[2468][048]", "[13579][26]")
# Divisible by 4 but not by 100 (the last two digits decide), or by 400 (the
# last two are 00 and the first two a multiple of 4).
_LEAP_YEAR = grouped("[0-9]{2}" + _NONZERO_MULTIPLE_OF_4, _MULTIPLE_OF_4 + "00")
_MONTH_31 = "(?:0[13578]|1[02])"
_MONTH_30 = "(?:0[469]|11)"
_DAYS_31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAYS_30 = "(?:0[1-9]|[12][0-9]|30)"
_DAYS_28 = "(?:0[1-9]|1[0-9]|2[0-8])"
FULL_DATE = grouped(
    f"{_YEAR}-" + grouped(f"{_MONTH_31}-{_DAYS_31}", f"{_MONTH_30}-{_DAYS_30}", f"02-{_DAYS_28}"),
    f"{_LEAP_YEAR}-02-29",
)

_HOUR = "(?:[01][0-9]|2[0-3])"
_MINUTE = "[0-5][0-9]"
_SECFRAC = optional("\\.[0-9]+")
_UTC = either_case("z")
_TIME_OFFSET = grouped(_UTC, f"[+\\-]{_HOUR}:{_MINUTE}")
_ORDINARY_TIME = f"{_HOUR}:{_MINUTE}:[0-5][0-9]{_SECFRAC}{_TIME_OFFSET}"


# A leap second is valid whenever the time less its offset is 23:59 UTC, but
# written exactly that ties the hh:mm before the fraction to the offset after
# it: one branch per local minute, a pattern of tens of kB that compiled slower
# than any other format. Only the UTC spelling is kept (an over-constraint:
# "15:59:60-08:00" is refused, never anything invalid accepted).
_UTC_OFFSET = grouped(_UTC, "[+\\-]00:00")
_LEAP_SECOND_TIME = f"23:59:60{_SECFRAC}{_UTC_OFFSET}"


FULL_TIME = grouped(_ORDINARY_TIME, _LEAP_SECOND_TIME)
DATE_TIME = f"{FULL_DATE}{either_case('t')}{FULL_TIME}"


def duration() -> str:
    """RFC 3339 appendix A: units in order, at least one, weeks on their own."""
    number = "[0-9]+"

    def unit(letter: str) -> str:
        return number + either_case(letter)

    second = unit("s")
    minute = unit("m") + optional(second)
    hour = unit("h") + optional(minute)
    time = either_case("t") + grouped(hour, minute, second)
    day = unit("d")
    month = unit("m") + optional(day)
    year = unit("y") + optional(month)
    date = grouped(day, month, year) + optional(time)
    return either_case("p") + grouped(date, time, unit("w"))

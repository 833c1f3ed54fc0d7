"""The whole bad-input corpus, in the order its cases are sent."""

from __future__ import annotations

from harness.bad_input.case import Case
from harness.bad_input.constraints import CONSTRAINT_CASES
from harness.bad_input.fields import FIELD_CASES
from harness.bad_input.hostile import HOSTILE_CASES

CORPUS: tuple[Case, ...] = (*CONSTRAINT_CASES, *HOSTILE_CASES, *FIELD_CASES)

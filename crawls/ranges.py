"""Reading the numbers of an HTTP `Range: bytes=FIRST-LAST` header (RFC 9110 §14.1.2).

A client may send any number of digits; Python refuses to convert more than 4,300 of them
(and a long one costs time), so a number longer than any file size is read as `HUGE`: a
first byte past every file (416), a last byte or a suffix that covers the whole file.
"""

from __future__ import annotations

import re

RANGE = re.compile(r"bytes=(\d*)-(\d*)")
HUGE = 10**18  # more bytes than any file has (an exbibyte is 1.15e18)


def byte_number(digits: str) -> int:
    """The value of a Range number's digits, at most HUGE."""
    digits = digits.lstrip("0") or "0"
    return HUGE if len(digits) > len(str(HUGE)) else min(int(digits), HUGE)

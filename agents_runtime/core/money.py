"""Exact money: Decimal values with at most 6 decimal places, below 10^9.

Such a value always survives the RFC 8785 number form (a double holds 15
significant digits exactly), so a budget read back from the log is the very
budget that was written.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NewType

Money = NewType("Money", Decimal)

ZERO = Money(Decimal(0))
LIMIT = Decimal(10**9)
PLACES = 6


def to_money(value: object) -> Money:
    """Read a JSON number as money, or raise ValueError saying why not."""
    if type(value) is int:
        number = Decimal(value)
    elif isinstance(value, Decimal):
        number = value
    else:
        raise ValueError("must be a number")
    if not number.is_finite():
        raise ValueError("must be a finite number")
    if number < 0:
        raise ValueError("must not be negative")
    if number >= LIMIT:
        raise ValueError("must be below 1000000000")
    exponent = number.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -PLACES:
        raise ValueError(f"must have at most {PLACES} decimal places")
    return Money(number)


def positive(value: object) -> Decimal:
    """A number > 0 with the same limits as money (scar limit, window)."""
    number = to_money(value)
    if number <= 0:
        raise ValueError("must be greater than 0")
    return number

"""Amounts of money in integer cents."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Money:
    """An amount in cents of one currency."""

    cents: int
    currency: str = "USD"

    def _check(self, other: "Money") -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot combine {other.currency} with {self.currency}")

    def __add__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.cents + other.cents, self.currency)

    def __sub__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.cents - other.cents, self.currency)

    def __str__(self) -> str:
        sign = "-" if self.cents < 0 else ""
        whole, cents = divmod(abs(self.cents), 100)
        return f"{sign}{whole}.{cents:02d} {self.currency}"

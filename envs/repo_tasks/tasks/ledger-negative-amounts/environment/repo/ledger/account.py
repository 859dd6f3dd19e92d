"""Accounts and transfers."""

from ledger.money import Money


class InsufficientFunds(Exception):
    """A withdrawal larger than the balance."""


class Account:
    """An account with a balance and a list of its transactions."""

    def __init__(self, owner: str, currency: str = "USD") -> None:
        self.owner = owner
        self.balance = Money(0, currency)
        self.transactions: list[tuple[str, Money]] = []

    def deposit(self, amount: Money) -> None:
        if amount.cents <= 0:
            raise ValueError("a deposit must be positive")
        self.balance = self.balance + amount
        self.transactions.append(("deposit", amount))

    def withdraw(self, amount: Money) -> None:
        if amount.cents <= 0:
            raise ValueError("a withdrawal must be positive")
        if amount.cents > self.balance.cents:
            raise InsufficientFunds(f"{self.owner} has {self.balance}, not {amount}")
        self.balance = self.balance - amount
        self.transactions.append(("withdraw", amount))


def transfer(source: Account, target: Account, amount: Money) -> None:
    """Move `amount` from `source` to `target`; a failed transfer changes neither."""
    source.withdraw(amount)
    target.deposit(amount)

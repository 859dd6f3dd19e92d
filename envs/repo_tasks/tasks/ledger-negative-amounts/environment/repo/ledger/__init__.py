"""A tiny bookkeeping library."""

from ledger.account import Account, InsufficientFunds, transfer
from ledger.money import Money

__all__ = ["Account", "InsufficientFunds", "Money", "transfer"]

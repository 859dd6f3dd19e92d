"""Closed integer intervals as (low, high) tuples."""

from intervals.core import merge, overlaps, parse

__all__ = ["merge", "overlaps", "parse"]

"""Closed integer intervals as (low, high) tuples."""

from intervals.core import merge, overlaps, parse, total_length

__all__ = ["merge", "overlaps", "parse", "total_length"]

"""Small text utilities."""

from textkit.case import slugify, title_case
from textkit.wrap import truncate, wrap

__all__ = ["slugify", "title_case", "truncate", "wrap"]

"""Case conversions."""

import re

SMALL_WORDS = {"a", "an", "and", "the", "of", "in", "on", "to"}


def slugify(text: str) -> str:
    """Lowercase `text`, keep letters and digits, join the words with single dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def title_case(text: str) -> str:
    """Capitalize every word except small words; the first and last word always."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        if word.lower() in SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:].lower())
    return " ".join(out)

"""Line wrapping and truncation."""


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap into lines of at most `width` characters.

    A word longer than `width` gets a line of its own (it is not split).
    """
    lines = []
    current = ""
    for word in text.split():
        if len(word) > width:
            continue
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def truncate(text: str, width: int, suffix: str = "...") -> str:
    """`text` if it fits in `width` characters, else its start plus `suffix`, `width` long."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix

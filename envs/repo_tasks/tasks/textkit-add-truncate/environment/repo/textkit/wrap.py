"""Line wrapping and truncation."""


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap into lines of at most `width` characters.

    A word longer than `width` gets a line of its own (it is not split).
    """
    lines = []
    current = ""
    for word in text.split():
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

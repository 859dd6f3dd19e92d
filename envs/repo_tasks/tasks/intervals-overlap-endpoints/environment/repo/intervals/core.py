"""Parsing, comparing and merging closed intervals."""

Interval = tuple[int, int]


def parse(text: str) -> list[Interval]:
    """Parse "1-3,5,7-9" into [(1, 3), (5, 5), (7, 9)]; empty items are skipped."""
    result = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "-" in item:
            low, high = item.split("-", 1)
            result.append((int(low), int(high)))
        else:
            result.append((int(item), int(item)))
    return result


def overlaps(a: Interval, b: Interval) -> bool:
    """Whether the closed intervals `a` and `b` share a point."""
    return a[0] < b[1] and b[0] < a[1]


def merge(intervals: list[Interval]) -> list[Interval]:
    """Merge intervals that share a point; the result is sorted."""
    merged: list[Interval] = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def total_length(intervals: list[Interval]) -> int:
    """How many integers the union of the intervals covers."""
    return sum(high - low + 1 for low, high in merge(intervals))

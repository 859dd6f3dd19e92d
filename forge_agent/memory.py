"""Giving freed heap memory back to the OS in long-lived processes that alternate phases.

glibc's malloc keeps the memory a process has freed (in its main heap and its per-thread
arenas) for later allocations; a process that allocates a lot in one phase (vLLM's engine
while generating, the trainer while stepping) then holds its peak while it waits for the
other phase. `trim_heap` hands the free pages back (`malloc_trim(0)`), so the processes of a
run do not all sit at their peaks at once. A no-op where the C library has no `malloc_trim`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import time


@functools.cache
def _malloc_trim() -> object | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None


def trim_heap() -> float:
    """Return the free memory of every malloc arena of this process to the OS; the seconds
    it took (0.0 where the C library cannot)."""
    trim = _malloc_trim()
    if trim is None:
        return 0.0
    started = time.perf_counter()
    trim(0)
    return time.perf_counter() - started

"""`trim_heap`: the freed heap of a thread's malloc arena goes back to the OS (the trainer and
generator processes call it between phases; their Python runs on Monarch's threads)."""

from __future__ import annotations

import threading

from forge_agent.memory import trim_heap


def _anon_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1])
    raise AssertionError("no Pss_Anon in smaps_rollup")


def test_trim_hands_back_what_a_thread_freed_and_keeps_what_is_live():
    held: list[bytes] = []

    def churn() -> None:
        chunks = [b"x" * (64 * 1024) for _ in range(3000)]  # ~190 MB, touched, in its arena
        held.extend(chunks[15::16])  # every 16th stays live: the freed space is in holes
        del chunks

    thread = threading.Thread(target=churn)
    thread.start()
    thread.join()
    before = _anon_kb()
    seconds = trim_heap()
    after = _anon_kb()
    assert before - after > 100_000, (before, after)  # > 100 MB of the ~180 MB freed
    assert all(len(h) == 64 * 1024 for h in held)  # live data untouched
    assert 0.0 < seconds < 1.0

"""Multi-hop lookups: the answer is reachable only by following references, one tool call each.

A task is a small table of records, each with a `next` reference and a `code`:

    r417: next=r052 code=8316
    r052: next=r983 code=1270
    ...

The prompt names a start record and a number of hops: "Start at r417. Follow next 3 times and
answer the code of the record you reach." The `lookup(key)` tool returns one record. The answer
needs `hops + 1` dependent calls (look up r417, which names r052, look up r052, ...), since only
a lookup shows a record's reference; the table also holds distractor records that no chain
visits. With `notes` > 0 every record also carries that many words of notes (the long tool
outputs of a long-horizon task: a transcript outgrows the context unless old outputs are
dropped, `rollout.context`). Rewards: `{"correct": 1.0 or 0.0}` for the final answer (the code,
as digits); info: `outcome` ("correct" | "wrong" | "no_answer"), `lookups`, `expected`.
`state_key()` is the set of records looked up so far (GiGPO's step-level groups).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

from forge_agent.env import Split, ToolEnv, holdout
from forge_agent.types import Message

__all__ = ["MultiHopEnv", "demonstration", "generate_tasks"]

SYSTEM_PROMPT = (
    "Records are only visible through the lookup tool. Look up the start record, follow its "
    "next reference the number of times asked, then reply with only the code of the record "
    "you reach."
)

_CODE = re.compile(r"\d{4}")
# fmt: off
_NOTE_WORDS = (  # the vocabulary of a record's notes
    "archived", "ledger", "entry", "filed", "under", "the", "regional", "index", "with",
    "cross", "references", "pending", "review", "by", "the", "records", "office", "and",
    "marked", "for", "retention", "until", "the", "next", "audit", "cycle",
)
# fmt: on


def record_text(key: str, record: dict[str, str], notes: int = 0) -> str:
    """What `lookup` shows of one record: `notes` words of notes (the same for the same key),
    then its key, next reference and code (last, where the reply ends, as without notes)."""
    text = f"{key}: next={record['next']} code={record['code']}"
    if notes:
        rng = random.Random(f"notes-{key}")
        text = "notes: " + " ".join(rng.choice(_NOTE_WORDS) for _ in range(notes)) + "\n" + text
    return text


def generate_tasks(n: int, seed: int = 0, hops: int = 3, records: int = 8) -> list[dict[str, Any]]:
    """`n` tasks: `records` records with distinct keys, a chain of `hops` references from the
    start, the rest distractors. The same for the same arguments."""
    if hops < 1 or records < hops + 1:
        raise ValueError(f"need hops >= 1 and records >= hops + 1, got {hops=} {records=}")
    rng = random.Random(f"multihop-{seed}-{hops}-{records}")
    tasks = []
    for i in range(n):
        keys = [f"r{k:03d}" for k in rng.sample(range(1000), records)]
        table = {
            k: {"next": rng.choice(keys), "code": f"{rng.randrange(1000, 10000)}"} for k in keys
        }
        chain = keys[: hops + 1]  # start, then one record per hop
        for a, b in itertools.pairwise(chain):
            table[a]["next"] = b
        tasks.append(
            {
                "task_id": f"multihop-h{hops}-s{seed}-{i}",
                "prompt": f"Start at {chain[0]}. Follow next {hops} times and answer the code "
                "of the record you reach.",
                "records": table,
                "answer": table[chain[-1]]["code"],
                "chain": chain,
            }
        )
    return tasks


class MultiHopEnv(ToolEnv):
    """Follow `hops` references through a table of records with `lookup`, answer the code.

    Args:
        hops: references to follow (the answer needs hops + 1 lookups).
        records: records per table (the rest are distractors).
        notes: words of notes every record shows after its code (0: none).
    """

    system_prompt = SYSTEM_PROMPT
    required_fields = ("prompt", "records", "answer")
    tool_timeout_s = 5.0

    def __init__(self, hops: int = 3, records: int = 8, notes: int = 0) -> None:
        if hops < 1 or records < hops + 1:
            raise ValueError(f"need hops >= 1 and records >= hops + 1, got {hops=} {records=}")
        if not isinstance(notes, int) or notes < 0:
            raise ValueError(f"notes must be an int >= 0, got {notes!r}")
        self.hops, self.records, self.notes = int(hops), int(records), notes
        self.visited: list[str] = []

    def get_tools(self) -> list[Any]:
        def lookup(key: str) -> str:
            """Show one record: its next reference and its code.

            Args:
                key: The record's key, e.g. r417.
            """
            self.visited.append(key)
            record = self.task["records"].get(key.strip())
            if record is None:
                return f"no record {key}"
            return record_text(key.strip(), record, self.notes)

        return [lookup]

    async def reset(self, task: dict[str, Any], seed: int | None = None):
        self.visited = []
        return await super().reset(task, seed)

    def state_key(self) -> str:
        return ",".join(sorted(set(self.visited)))

    def default_task(self, seed: int) -> dict[str, Any]:
        return generate_tasks(1, seed=seed, hops=self.hops, records=self.records)[0]

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """The `split` share of `n` generated tables (split by the chain's start and answer)."""
        made = generate_tasks(n, seed=seed, hops=self.hops, records=self.records)
        return holdout(made, split, key=lambda t: "multihop:" + "/".join(t["chain"]) + t["answer"])

    def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        codes = _CODE.findall(answer)
        expected = str(self.task["answer"])
        outcome = "no_answer" if not codes else "correct" if codes[-1] == expected else "wrong"
        info = {"outcome": outcome, "lookups": len(self.visited), "expected": expected}
        return {"correct": float(outcome == "correct")}, info

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[dict[str, Any]]:
        """Solutions that look up the whole chain; a `1 - demo_fraction` share stops one or
        more lookups short and answers the code it has (wrong: RL has to find that following
        every reference pays). Each with its task (its records answer the lookups), so that
        `--check` replays it through the env on that task."""
        rng = random.Random(f"multihop-demos-{seed}")
        out = []
        for task in generate_tasks(n, seed=seed + 7919, hops=self.hops, records=self.records):
            full = rng.random() < demo_fraction
            stop_after = None if full else rng.randint(1, self.hops)
            out.append({"messages": demonstration(task, stop_after, self.notes), "task": task})
        return out

    def corpus(self) -> list[list[Message]]:
        return [demonstration(t) for t in generate_tasks(200, seed=12345, hops=self.hops)]


def demonstration(
    task: dict[str, Any], stop_after: int | None = None, notes: int = 0
) -> list[Message]:
    """Lookups along the chain and the final code; `stop_after` lookups, then answer the last
    code seen, for a short (wrong) one."""
    chain = task["chain"][: stop_after or len(task["chain"])]
    table = task["records"]
    convo: list[Message] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["prompt"]},
    ]
    for k, key in enumerate(chain):
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": key})},
        }
        record = table[key]
        convo.append({"role": "assistant", "content": "", "tool_calls": [call]})
        convo.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{k}",
                "name": "lookup",
                "content": record_text(key, record, notes),
            }
        )
    convo.append({"role": "assistant", "content": table[chain[-1]]["code"]})
    return convo

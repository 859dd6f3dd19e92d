"""Trajectory traces: one JSON line per episode, for the HTML viewer and for later analysis.

A trace record is `Trajectory.to_json()` (messages, token arrays, rewards, status, versions,
timings) plus summary counts and the caller's `extra` dict:

    {"task_id", "group_id", "token_ids", "loss_mask", "logprobs", "versions", "turn_spans",
     "segment_starts", "messages", "reward_components", "reward", "advantage", "status",
     "tool_error_count", "tool_call_count", "info", "timings",            # Trajectory fields
     "num_tokens", "num_sampled", "num_turns", "min_version", "max_version",   # summary
     "written_at": unix seconds, "extra": {...}}

Known `extra` keys (all optional): `step` (controller step), `policy_version` (the learner's
version when the episode was written; the viewer shows policy lag = policy_version - min_version).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from forge_agent.types import Trajectory

logger = logging.getLogger(__name__)

_TRAJECTORY_FIELDS = frozenset(f.name for f in dataclasses.fields(Trajectory))


def _json_default(value: Any) -> Any:
    """Make numpy/torch scalars, sets and other stragglers JSON-able."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist") and callable(value.tolist):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def trace_record(traj: Trajectory, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-able record `TraceWriter.write` stores for `traj`."""
    rec = traj.to_json()
    sampled_versions = [v for v in traj.versions if v >= 0]
    rec.update(
        num_tokens=len(traj.token_ids),
        num_sampled=traj.num_sampled,
        num_turns=len(traj.turn_spans),
        min_version=min(sampled_versions) if sampled_versions else -1,
        max_version=max(sampled_versions) if sampled_versions else -1,
        written_at=time.time(),
        extra=dict(extra or {}),
    )
    return rec


def trajectory_from_record(rec: dict[str, Any]) -> Trajectory:
    """Rebuild the `Trajectory` stored in a trace record (summary keys are dropped)."""
    return Trajectory.from_json({k: v for k, v in rec.items() if k in _TRAJECTORY_FIELDS})


_SURROGATE = re.compile("[\ud800-\udfff]")


def _trace_line(traj: Trajectory, extra: dict[str, Any] | None) -> str:
    """`traj`'s record as one JSON line that always writes: lone surrogates (which UTF-8
    cannot encode; the policy's text can hold them) become U+FFFD, and a record that does not
    serialize at all (nested past the stack) becomes one naming the episode and the error."""
    try:
        line = json.dumps(trace_record(traj, extra), default=_json_default, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as exc:
        logger.warning("trace of episode %s kept short: %s", traj.task_id, exc)
        short = {
            "task_id": str(traj.task_id),
            "group_id": str(traj.group_id),
            "status": str(getattr(traj.status, "value", traj.status)),
            "reward": traj.reward,
            "trace_error": f"{type(exc).__name__}: {exc}"[:300],
            "written_at": time.time(),
            "extra": {str(k): str(v)[:200] for k, v in (extra or {}).items()},
        }
        line = json.dumps(short, default=str, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = _SURROGATE.sub("\ufffd", line)
    return line


class TraceWriter:
    """Appends one JSON line per trajectory to `path` (created with its parent folders).

    Each line is written whole and flushed, so a crash leaves at most one partial last line,
    which `read_traces` skips. Safe to share between threads. With `keep` (the run's
    `metrics.traces_last`), the file holds the last `keep` episodes: it is cut back to them
    whenever it reaches twice as many (so it never holds more than `2 * keep - 1` while
    written) and on `close`; `keep=0` writes nothing. A file already there (a resumed run)
    counts towards it.
    """

    def __init__(self, path: str | Path, keep: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self._lines = 0
        if keep is not None and self.path.exists():
            with self.path.open(encoding="utf-8") as f:
                self._lines = sum(1 for line in f if line.strip())
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, traj: Trajectory, extra: dict[str, Any] | None = None) -> None:
        """Append `traj` (and `extra`, e.g. {"step": 3, "policy_version": 7}) as one line."""
        if self.keep == 0:
            return
        line = _trace_line(traj, extra)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self._lines += 1
            if self.keep is not None and self._lines >= 2 * self.keep:
                self._trim()

    def _trim(self) -> None:
        """Cut the file back to its last `keep` lines (atomically: a new file renamed over)."""
        assert self.keep is not None
        self._file.close()
        lines = [line for line in self.path.read_text(encoding="utf-8").splitlines() if line]
        kept = lines[-self.keep :] if self.keep else []
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        tmp.replace(self.path)
        self._lines = len(kept)
        self._file = self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        """Cut the file to its last `keep` episodes and close it; later writes raise."""
        with self._lock:
            if self.keep is not None and self._lines > self.keep and not self._file.closed:
                self._trim()
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_traces(path: str | Path, last: int | None = None) -> list[dict[str, Any]]:
    """Read the trace records in `path`, oldest first (only the `last` N when given).

    Blank lines are ignored; a line that does not parse is skipped with a warning when it is
    the final line (a write cut short), and raises `ValueError` naming the line otherwise.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    records: list[dict[str, Any]] = []
    for k, (lineno, line) in enumerate(numbered):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if k == len(numbered) - 1:
                logger.warning("%s:%d: skipping a truncated last line (%s)", path, lineno, err)
                continue
            raise ValueError(f"{path}:{lineno}: not a JSON trace record: {err}") from err
    if last is not None:
        records = records[-last:] if last > 0 else []
    return records

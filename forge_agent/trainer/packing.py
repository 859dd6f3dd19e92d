"""Sequence packing: variable-length trajectories -> micro-batches of packed rows.

Trajectories are packed first-fit-decreasing into rows of at most `row_tokens` tokens (a
longer trajectory gets a row of its own); rows, longest first, are grouped into micro-batches
of at most `microbatch_tokens` (rows x longest row), so a micro-batch `[R, L]` wastes only the
tail of each row. A trajectory is split into training sequences at its `segment_starts` (a
segment is a separately rendered prompt+completion; see `Trajectory`); its sequences sit side
by side in one row. Attention isolation comes from `segment_ids` (block-diagonal causal mask)
and `position_ids` restarting at 0 for every sequence. A trajectory never spans micro-batches
(sequence-level losses such as GSPO need all of it).

`gather_index[b, t]` is the flat index (into `[R * L]`) of token t of the micro-batch's b-th
trajectory, so per-token values computed on packed rows unpack to `[B, T]` with one gather.
With `packing=False` every sequence gets its own row, padded to the micro-batch's longest
(the padded baseline used by `apps/bench/train_step.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from forge_agent.types import Trajectory


@dataclass
class MicroBatch:
    """One forward/backward pass worth of packed rows."""

    input_ids: torch.Tensor  # [R, L] long, 0 in padding
    position_ids: torch.Tensor  # [R, L] long, restarting at 0 per sequence
    segment_ids: torch.Tensor  # [R, L] long, unique per sequence in the row, -1 in padding
    gather_index: torch.Tensor  # [B, T] long into the flattened [R * L]
    valid: torch.Tensor  # [B, T] bool, t < len(trajectory b)
    seq_start: torch.Tensor  # [B, T] bool, token t starts a sequence (no prediction for it)
    traj_indices: list[int]  # index of each of the B trajectories in the step's input
    num_tokens: int  # real tokens (sum of trajectory lengths)

    @property
    def padded_tokens(self) -> int:
        return self.input_ids.numel()

    def attention_mask(self, kind: str = "bool", dtype: torch.dtype = torch.float32):
        """Block-diagonal causal mask `[R, 1, L, L]`: True/0.0 where query i may attend key j
        (same sequence and j <= i). `kind="additive"` gives 0 / dtype-min for eager attention.
        Padding tokens attend only to themselves (keeps softmax finite)."""
        seg = self.segment_ids  # [R, L]
        L = seg.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool, device=seg.device).tril()
        same = seg[:, :, None] == seg[:, None, :]  # [R, L, L]
        pad_self = (seg < 0)[:, :, None] & torch.eye(L, dtype=torch.bool, device=seg.device)
        allowed = ((same & (seg >= 0)[:, :, None]) | pad_self) & causal  # [R, L, L]
        allowed = allowed[:, None]  # [R, 1, L, L]
        if kind == "bool":
            return allowed
        zero = torch.zeros((), dtype=dtype, device=seg.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)

    def to(self, device: torch.device | str) -> MicroBatch:
        return MicroBatch(
            self.input_ids.to(device),
            self.position_ids.to(device),
            self.segment_ids.to(device),
            self.gather_index.to(device),
            self.valid.to(device),
            self.seq_start.to(device),
            self.traj_indices,
            self.num_tokens,
        )


def segments(traj: Trajectory) -> list[tuple[int, int]]:
    """(start, end) of each training sequence of a trajectory."""
    n = len(traj.token_ids)
    starts = sorted({s for s in traj.segment_starts if 0 <= s < n} | {0})
    return [(s, e) for s, e in zip(starts, [*starts[1:], n], strict=True)]


def _rows(lengths: Sequence[int], row_tokens: int, packing: bool) -> list[list[int]]:
    """Trajectory indices per row: first-fit decreasing into rows of `row_tokens` (a longer
    trajectory gets a row of its own), longest rows first; or one trajectory per row, in
    arrival order, for the padded baseline."""
    if not packing:
        return [[i] for i in range(len(lengths))]
    rows: list[list[int]] = []
    fill: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r in range(len(rows)):
            if fill[r] + lengths[i] <= row_tokens:
                rows[r].append(i)
                fill[r] += lengths[i]
                break
        else:
            rows.append([i])
            fill.append(lengths[i])
    order = sorted(range(len(rows)), key=lambda r: -fill[r])
    return [rows[r] for r in order]


def _microbatches(
    rows: list[list[int]], lengths: Sequence[int], microbatch_tokens: int
) -> list[list[list[int]]]:
    """Group consecutive rows while rows x longest row stays within the token budget."""
    groups: list[list[list[int]]] = []
    cur: list[list[int]] = []
    longest = 0
    for row in rows:
        n = sum(lengths[i] for i in row)
        if cur and (len(cur) + 1) * max(longest, n) > microbatch_tokens:
            groups.append(cur)
            cur, longest = [], 0
        cur.append(row)
        longest = max(longest, n)
    if cur:
        groups.append(cur)
    return groups


def _build(trajectories: Sequence[Trajectory], rows: list[list[int]]) -> MicroBatch:
    idx = [i for row in rows for i in row]  # the micro-batch's trajectories, row by row
    b_of = {i: b for b, i in enumerate(idx)}
    R = len(rows)
    L = max(sum(len(trajectories[i].token_ids) for i in row) for row in rows)
    T = max(len(trajectories[i].token_ids) for i in idx)
    input_ids = torch.zeros(R, L, dtype=torch.long)
    position_ids = torch.zeros(R, L, dtype=torch.long)
    segment_ids = torch.full((R, L), -1, dtype=torch.long)
    gather_index = torch.zeros(len(idx), T, dtype=torch.long)
    valid = torch.zeros(len(idx), T, dtype=torch.bool)
    seq_start = torch.zeros(len(idx), T, dtype=torch.bool)
    for r, row in enumerate(rows):
        col = seg = 0
        for i in row:  # a trajectory's segments sit side by side, each its own sequence
            traj, b = trajectories[i], b_of[i]
            ids = torch.tensor(traj.token_ids, dtype=torch.long)
            n = len(ids)
            input_ids[r, col : col + n] = ids
            gather_index[b, :n] = torch.arange(r * L + col, r * L + col + n)
            valid[b, :n] = True
            for s, e in segments(traj):
                position_ids[r, col + s : col + e] = torch.arange(e - s)
                segment_ids[r, col + s : col + e] = seg
                seq_start[b, s] = True
                seg += 1
            col += n
        position_ids[r, col:] = torch.arange(L - col)  # padding: its own "sequence"
    num_tokens = sum(len(trajectories[i].token_ids) for i in idx)
    return MicroBatch(
        input_ids, position_ids, segment_ids, gather_index, valid, seq_start, idx, num_tokens
    )


def pack_trajectories(
    trajectories: Sequence[Trajectory],
    row_tokens: int = 4096,
    microbatch_tokens: int = 16384,
    packing: bool = True,
) -> list[MicroBatch]:
    """Split trajectories into micro-batches (see the module docstring)."""
    if row_tokens <= 0 or microbatch_tokens <= 0:
        raise ValueError(
            f"row_tokens and microbatch_tokens must be > 0, got {row_tokens}, {microbatch_tokens}"
        )
    for t in trajectories:
        n = len(t.token_ids)
        if n == 0:
            raise ValueError(f"trajectory {t.task_id}/{t.group_id} has no tokens")
        if len(t.loss_mask) != n or len(t.logprobs) != n:
            raise ValueError(
                f"trajectory {t.task_id}/{t.group_id}: token_ids has {n} entries but loss_mask "
                f"has {len(t.loss_mask)} and logprobs {len(t.logprobs)}"
            )
    lengths = [len(t.token_ids) for t in trajectories]
    rows = _rows(lengths, row_tokens, packing)
    return [_build(trajectories, g) for g in _microbatches(rows, lengths, microbatch_tokens)]

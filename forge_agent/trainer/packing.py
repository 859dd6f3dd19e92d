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
trajectory, so per-token values computed on packed rows unpack to `[B, T]` with one gather;
token t is predicted at the position of token t - 1 (`gather_index[b, t - 1]`).
With `packing=False` every sequence gets its own row, padded to the micro-batch's longest
(the padded baseline used by `apps/bench/train_step.py`).

Shared prefixes (`share_prefix=True`): the episodes of one group start from the same prompt
(same task, same env seed), often more than half of their tokens. Trajectories of one
`group_id` are then laid out as one block: their longest common prefix (within their first
segment) once, then each trajectory's rest, which attends to that prefix (`parent_ids`) and
to itself, with positions continuing from the prefix. Every token sees exactly the tokens it
saw alone, so logprobs and gradients are those of the plain layout while the prefix is
computed once; per-token values still unpack through `gather_index` (shared positions are
gathered once per trajectory). A block longer than `row_tokens` is split into several, each
with its own copy of the prefix.
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
    # [R, L] long: the segment (a shared prefix) a token's sequence continues, -1 for none
    parent_ids: torch.Tensor | None = None

    @property
    def padded_tokens(self) -> int:
        return self.input_ids.numel()

    @property
    def computed_tokens(self) -> int:
        """Positions holding a token (fewer than `num_tokens` where prefixes are shared)."""
        return int((self.segment_ids >= 0).sum())

    @property
    def pred_index(self) -> torch.Tensor:
        """`[B, T]` flat index of the position predicting token t (token t - 1's; token 0's
        own, unused: no prediction for a sequence's first token)."""
        g = self.gather_index
        return torch.cat([g[:, :1], g[:, :-1]], dim=1)

    def attention_mask(self, kind: str = "bool", dtype: torch.dtype = torch.float32):
        """Block-diagonal causal mask `[R, 1, L, L]`: True/0.0 where query i may attend key j
        (same sequence, or j in the shared prefix i's sequence continues, and j <= i).
        `kind="additive"` gives 0 / dtype-min for eager attention. Padding tokens attend only
        to themselves (keeps softmax finite)."""
        seg = self.segment_ids  # [R, L]
        L = seg.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool, device=seg.device).tril()
        same = seg[:, :, None] == seg[:, None, :]  # [R, L, L]
        if self.parent_ids is not None:
            parent = self.parent_ids
            same = same | ((parent[:, :, None] == seg[:, None, :]) & (parent >= 0)[:, :, None])
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
            None if self.parent_ids is None else self.parent_ids.to(device),
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


Block = tuple[int, list[int]]  # (shared prefix length, trajectory indices); 0: no sharing


def _blocks(trajectories: Sequence[Trajectory], row_tokens: int, share_prefix: bool) -> list[Block]:
    """The packing units: one trajectory each, or with `share_prefix` the trajectories of a
    group over their common prefix (split so a block fits `row_tokens` where it can)."""
    if not share_prefix:
        return [(0, [i]) for i in range(len(trajectories))]
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(t.group_id, []).append(i)
    blocks: list[Block] = []
    for members in groups.values():
        p = _common_prefix([trajectories[i] for i in members])
        if len(members) < 2 or p < 2:
            blocks.extend((0, [i]) for i in members)
            continue
        cur: list[int] = []
        size = p
        for i in members:
            rest = len(trajectories[i].token_ids) - p
            if cur and size + rest > row_tokens:
                blocks.append((p, cur))
                cur, size = [], p
            cur.append(i)
            size += rest
        blocks.append((p, cur) if len(cur) > 1 else (0, cur))
    return blocks


def _common_prefix(trajs: Sequence[Trajectory]) -> int:
    """Tokens all `trajs` start with, within each one's first segment."""
    limit = min(segments(t)[0][1] for t in trajs)
    first = trajs[0].token_ids
    p = 0
    while p < limit and all(t.token_ids[p] == first[p] for t in trajs):
        p += 1
    return p


def unit_lengths(
    trajectories: Sequence[Trajectory], row_tokens: int, share_prefix: bool = False
) -> list[int]:
    """The length of each packing unit: a trajectory, or with `share_prefix` a group block."""
    return [_block_len(trajectories, b) for b in _blocks(trajectories, row_tokens, share_prefix)]


def _block_len(trajectories: Sequence[Trajectory], block: Block) -> int:
    p, members = block
    return p + sum(len(trajectories[i].token_ids) - p for i in members)


def _build(
    trajectories: Sequence[Trajectory], blocks: list[Block], rows: list[list[int]]
) -> MicroBatch:
    idx = [i for row in rows for k in row for i in blocks[k][1]]  # trajectories, row by row
    b_of = {i: b for b, i in enumerate(idx)}
    R = len(rows)
    L = max(sum(_block_len(trajectories, blocks[k]) for k in row) for row in rows)
    T = max(len(trajectories[i].token_ids) for i in idx)
    input_ids = torch.zeros(R, L, dtype=torch.long)
    position_ids = torch.zeros(R, L, dtype=torch.long)
    segment_ids = torch.full((R, L), -1, dtype=torch.long)
    parent_ids = torch.full((R, L), -1, dtype=torch.long)
    gather_index = torch.zeros(len(idx), T, dtype=torch.long)
    valid = torch.zeros(len(idx), T, dtype=torch.bool)
    seq_start = torch.zeros(len(idx), T, dtype=torch.bool)
    for r, row in enumerate(rows):
        col = seg = 0
        for k in row:
            p, members = blocks[k]
            prefix_seg, prefix_col = -1, col
            if p:  # the shared prefix, once
                ids = trajectories[members[0]].token_ids[:p]
                input_ids[r, col : col + p] = torch.tensor(ids, dtype=torch.long)
                position_ids[r, col : col + p] = torch.arange(p)
                segment_ids[r, col : col + p] = prefix_seg = seg
                seg += 1
                col += p
            for i in members:  # each trajectory's tokens after the prefix, side by side
                traj, b = trajectories[i], b_of[i]
                n = len(traj.token_ids)
                input_ids[r, col : col + n - p] = torch.tensor(traj.token_ids[p:], dtype=torch.long)
                gather_index[b, :p] = torch.arange(r * L + prefix_col, r * L + prefix_col + p)
                gather_index[b, p:n] = torch.arange(r * L + col, r * L + col + n - p)
                valid[b, :n] = True
                for s, e in segments(traj):  # each segment its own sequence
                    seq_start[b, s] = True
                    lo = max(s, p)  # the prefix holds the first segment's start
                    position_ids[r, col + lo - p : col + e - p] = torch.arange(lo - s, e - s)
                    segment_ids[r, col + lo - p : col + e - p] = seg
                    if s == 0:
                        parent_ids[r, col + lo - p : col + e - p] = prefix_seg
                    seg += 1
                col += n - p
        position_ids[r, col:] = torch.arange(L - col)  # padding: its own "sequence"
    num_tokens = sum(len(trajectories[i].token_ids) for i in idx)
    shared = any(blocks[k][0] for row in rows for k in row)
    return MicroBatch(
        input_ids,
        position_ids,
        segment_ids,
        gather_index,
        valid,
        seq_start,
        idx,
        num_tokens,
        parent_ids if shared else None,
    )


def pack_trajectories(
    trajectories: Sequence[Trajectory],
    row_tokens: int = 4096,
    microbatch_tokens: int = 16384,
    packing: bool = True,
    share_prefix: bool = False,
) -> list[MicroBatch]:
    """Split trajectories into micro-batches (see the module docstring; `share_prefix` lays
    a group's common prefix out once, and needs `packing`)."""
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
    blocks = _blocks(trajectories, row_tokens, share_prefix and packing)
    lengths = [_block_len(trajectories, b) for b in blocks]
    rows = _rows(lengths, row_tokens, packing)
    return [
        _build(trajectories, blocks, g) for g in _microbatches(rows, lengths, microbatch_tokens)
    ]


def pad_rows(rows: Sequence[Sequence[float]], T: int, dtype: torch.dtype) -> torch.Tensor:
    """Per-token values of each trajectory (`rows`) as `[B, T]`, zero past each row's end."""
    out = torch.zeros(len(rows), T, dtype=dtype)
    for b, r in enumerate(rows):
        out[b, : len(r)] = torch.tensor(r, dtype=dtype)
    return out

"""One token history: the exact tokens a policy saw and sampled in one episode.

Every producer of trajectories writes through it: single-agent episodes and each policy seat of
a game (`forge_agent.rollout.episode`), endpoint sessions (`forge_agent.endpoint.session`) and
the warm start's demonstrations (`forge_agent.warm_start`). Into its `Trajectory` it appends

    prompt tokens    (mask 0, logprob 0.0, version -1)   the opening render, env messages
    sampled tokens   (mask 1, sampler logprob, the version that sampled each)   one turn each

A segment is one prompt the policy extended append-only, turn after turn:

    segment: P1 | C1 | tail(T1) | C2 | tail(T2) | C3 ...    next prompt = P1 + C1 + tail(T1)
    a rewrite (the renderer cannot bridge, a harness edits its history, the context strategy
    compacts it) -> a full render starts a new segment (`Trajectory.segment_starts`)

Sampled tokens are never re-tokenized. The trainer splits a trajectory at its segment starts
(`forge_agent.trainer.packing`): each segment is trained on exactly the tokens the policy saw
when it sampled, and every segment shares the episode's reward and advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Message, ToolSpec, Trajectory


class TokenHistory:
    """The token record of one policy seat, written into `traj`.

    `prompt` is the current segment's last prompt (what the generator was, or will be, sent);
    `completion` the tokens sampled after it (None until a turn is sampled on this prompt).
    """

    def __init__(self, traj: Trajectory) -> None:
        self.traj = traj
        self.prompt: list[int] = []
        self.completion: list[int] | None = None

    # ------------------------------------------------------------------ token level
    def start_segment(self, prompt_ids: Sequence[int]) -> list[int]:
        """A full render: `prompt_ids` open a segment (the first, or a new one after a
        rewrite); returns the prompt."""
        traj = self.traj
        if traj.token_ids:
            traj.segment_starts.append(len(traj.token_ids))
        self.prompt = list(prompt_ids)
        self.completion = None
        self._extend_prompt(self.prompt)
        return self.prompt

    def extend_to(self, next_prompt: Sequence[int]) -> list[int]:
        """`next_prompt` continues `prompt + completion` append-only: its new tail is recorded
        as prompt tokens; returns it."""
        base = len(self.prompt) + len(self.completion or ())
        if len(next_prompt) < base:
            raise ValueError(
                f"next prompt of {len(next_prompt)} tokens does not extend the history's "
                f"{base} (use start_segment for a rewrite)"
            )
        self.prompt = list(next_prompt)
        self.completion = None
        self._extend_prompt(self.prompt[base:])
        return self.prompt

    def record_turn(
        self, ids: Sequence[int], logprobs: Sequence[float], versions: Sequence[int]
    ) -> tuple[int, int]:
        """One sampled turn after `prompt`: mask 1, the sampler's logprob and the policy
        version of each token; returns its span (also appended to `turn_spans`)."""
        traj = self.traj
        n = len(ids)
        if len(logprobs) < n or len(versions) < n:
            raise ValueError(
                f"a sampled turn of {n} tokens needs as many logprobs ({len(logprobs)}) "
                f"and versions ({len(versions)})"
            )
        start = len(traj.token_ids)
        traj.token_ids.extend(ids)
        traj.loss_mask.extend([1] * n)
        traj.logprobs.extend(logprobs[:n])
        traj.versions.extend(versions[:n])
        traj.turn_spans.append((start, start + n))
        self.completion = list(ids)
        return start, start + n

    def _extend_prompt(self, ids: Sequence[int]) -> None:
        traj = self.traj
        traj.token_ids.extend(ids)
        traj.loss_mask.extend([0] * len(ids))
        traj.logprobs.extend([0.0] * len(ids))
        traj.versions.extend([-1] * len(ids))

    # ------------------------------------------------------------------ message level
    def next_prompt(
        self,
        renderer: ChatRenderer,
        new_messages: list[Message],
        tools: list[ToolSpec] | None,
        completion: Sequence[int] | None = None,
    ) -> list[int] | None:
        """The bridge-or-render decision, made here for every producer (an episode's seat, an
        endpoint session, a demonstration): the next prompt as `prompt + completion +
        new_messages`' tokens bridged append-only, or None when a full render must start a
        new segment (the renderer cannot extend the sampled history, or nothing is new).
        `completion`: the turn to bridge after (default: the recorded one). A renderer that
        raises counts as one that cannot bridge (`traj.info["bridge_error"]`); each None counts
        one `bridge_fallbacks` in `traj.info`, the one place it is kept. Records no tokens."""
        sampled = self.completion if completion is None else list(completion)
        try:
            bridged = None
            if sampled is not None and new_messages:
                bridged = renderer.bridge(self.prompt, sampled, new_messages, tools)
        except Exception as exc:  # fall back to a full render, noted
            self.traj.info["bridge_error"] = repr(exc)[:300]
            bridged = None
        if bridged is None:
            info = self.traj.info
            info["bridge_fallbacks"] = info.get("bridge_fallbacks", 0) + 1
        return bridged

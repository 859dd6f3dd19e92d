"""Core data types shared by every part of forge-agent.

Vocabulary (one name per concept, used everywhere):
- task: one dataset row (a prompt/problem plus whatever the env needs to judge it).
- episode / trajectory: one rollout of the policy on one task.
- group: G trajectories of the same task from the same env start state.
- batch: what the trainer consumes in one step.

Messages are OpenAI-style dicts (role, content, tool_calls, tool_call_id), so envs, tools and
renderers exchange plain data. Token-level arrays live on the `Trajectory`.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

Message = dict[str, Any]
"""An OpenAI-style chat message: role, content, optional tool_calls, tool_call_id, name."""

ToolSpec = dict[str, Any]
"""A tool's schema in the OpenAI function-calling shape: {"type": "function", "function": {...}}."""

ActorMesh = Any
"""A Monarch actor mesh (what `ProcMesh.spawn` returns). Its endpoints are looked up by name
at run time, so Monarch 0.7 exports no type to annotate it with; this alias names the role."""


class Status(enum.StrEnum):
    """How an episode ended.

    The rule of blame (docs/rewards.md): what the policy's output can cause is the policy's
    failure, scored with the env's failure reward and trained on (`policy_error`: a judge,
    parser, tool or the env raised on its answer; `policy_timeout`: acting on its message ran
    past the step deadline; `tampered`: its code interfered with the grader). Only what the
    policy cannot cause is infra (`env_error`: an env that fails to start or reset, a dead
    worker, an `InfraError`; `env_timeout`: a reset, start or close past its deadline;
    `generator_error`): excluded from baselines and losses, and counted wherever it is.
    """

    OK = "ok"
    TRUNCATED_LENGTH = "truncated_length"
    TRUNCATED_TURNS = "truncated_turns"
    PROMPT_TOO_LONG = "prompt_too_long"
    ENV_ERROR = "env_error"
    ENV_TIMEOUT = "env_timeout"
    GENERATOR_ERROR = "generator_error"
    FORFEIT = "forfeit"  # a seat left its game unfinished and lost it (`rollout.forfeit_reward`)
    POLICY_ERROR = "policy_error"
    POLICY_TIMEOUT = "policy_timeout"
    TAMPERED = "tampered"

    @property
    def is_infra_failure(self) -> bool:
        """True when the episode failed for reasons outside the policy's control."""
        return self in INFRA_STATUSES

    @property
    def is_policy_failure(self) -> bool:
        """True when the policy's own output ended the episode in failure: it scores the env's
        failure reward (`Trajectory.info["failure_reward"]`) and is trained on."""
        return self in POLICY_FAILURE_STATUSES

    @property
    def is_truncated(self) -> bool:
        return self in (Status.TRUNCATED_LENGTH, Status.TRUNCATED_TURNS, Status.PROMPT_TOO_LONG)


INFRA_STATUSES = frozenset({Status.ENV_ERROR, Status.ENV_TIMEOUT, Status.GENERATOR_ERROR})
POLICY_FAILURE_STATUSES = frozenset({Status.POLICY_ERROR, Status.POLICY_TIMEOUT, Status.TAMPERED})


@dataclass
class StepResult:
    """What an env returns for one assistant message."""

    messages: list[Message]  # tool / user messages to append to the conversation
    rewards: dict[str, float] = field(default_factory=dict)  # named reward components
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SeatStart:
    """What a seated env's `reset` returns (see `forge_agent.env.SeatEnv`): each seat's opening
    messages and tools, and the seat whose move it is."""

    seats: dict[str, tuple[list[Message], list[ToolSpec]]]
    turn: str
    zero_sum: bool = False  # the seats' rewards of a finished episode sum to 0 (checked)


@dataclass
class SeatStep:
    """What a seated env returns for one seat's move.

    `messages[seat]`: new messages that seat reads before its next move (a seat with none may
    be left out); `turn`: the seat to move next (None once `done`); `rewards[seat]`: named
    reward components of each seat (at the end of the episode, or intermediate).
    """

    messages: dict[str, list[Message]] = field(default_factory=dict)
    turn: str | None = None
    rewards: dict[str, dict[str, float]] = field(default_factory=dict)
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    """One generator answer for one prompt (token ids in, token ids out)."""

    token_ids: list[int]
    logprobs: list[float]  # sampler logprob of each generated token
    finish_reason: str  # "stop" | "length" | "abort"
    policy_version: int  # the version that sampled the first token
    prompt_logprobs: list[float | None] | None = None  # only when asked for
    # the version that sampled each token; None: all `policy_version`. A request interrupted
    # by a weight update (partial rollout) continues on the new weights with the new version.
    versions: list[int] | None = None
    cached_tokens: int = 0  # prompt tokens vLLM's prefix cache served instead of computing

    def token_versions(self) -> list[int]:
        """The policy version of each generated token."""
        if self.versions is not None:
            return list(self.versions)
        return [self.policy_version] * len(self.token_ids)


@dataclass
class Trajectory:
    """One episode, token by token.

    `token_ids` is the whole episode (prompt, sampled and env tokens) as the policy saw it.
    Per-token arrays have the same length as `token_ids`:
    - `loss_mask[i]` is 1 exactly where the policy sampled token i;
    - `logprobs[i]` is the sampler's logprob of token i (0.0 where loss_mask is 0);
    - `versions[i]` is the policy version that sampled token i (-1 where loss_mask is 0).
    `turn_spans` holds (start, end) of each assistant turn's sampled tokens. Per turn k (same
    length as `turn_spans`, filled by the rollout engine):
    - `turn_rewards[k]`: the reward the env returned at the step answering turn k (0.0 for
      turns it returned none; rewards the reward actors add after the episode count at the
      last turn, see `forge_agent.algorithms.advantages.turn_returns`);
    - `turn_states[k]`: the env's key of the state turn k started from (None when the env has
      no `state_key`; GiGPO's step-level groups are made of turns with equal keys).
    `turn_advantages[k]` is turn k's advantage when the run uses turn-level credit (empty:
    every sampled token gets `advantage`).
    `segment_starts` lists indices where a new training segment starts (a full re-render
    happened because the prompt could not be bridged append-only).
    `adapter` names the LoRA adapter that sampled the episode and trains on it (None: the
    run's only policy, see `trainer.lora.adapters`).
    """

    task_id: str
    group_id: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    segment_starts: list[int] = field(default_factory=lambda: [0])
    messages: list[Message] = field(default_factory=list)
    reward_components: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    advantage: float = 0.0
    turn_rewards: list[float] = field(default_factory=list)
    turn_states: list[str | None] = field(default_factory=list)
    turn_advantages: list[float] = field(default_factory=list)
    status: Status = Status.OK
    tool_error_count: int = 0
    tool_call_count: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    adapter: str | None = None

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)

    @property
    def min_version(self) -> int:
        sampled = [v for v in self.versions if v >= 0]
        return min(sampled) if sampled else -1

    def fail_by_policy(self, status: Status, error: str, failure_reward: float) -> None:
        """End the episode as the policy's failure (`status.is_policy_failure`): its reward is
        `failure_reward` alone (rewards earned on earlier turns are withdrawn, so a failure
        cannot keep them), recorded at its last sampled turn, and `error` says what happened."""
        if not status.is_policy_failure:
            raise ValueError(f"{status.value!r} is not a policy failure status")
        self.status = status
        self.info["error"] = error
        self.info["failure_reward"] = float(failure_reward)
        self.reward_components = {"policy_failure": float(failure_reward)}
        self.reward = float(failure_reward)
        self.turn_rewards = [0.0] * len(self.turn_spans)
        if self.turn_rewards:
            self.turn_rewards[-1] = float(failure_reward)

    def token_advantages(self) -> list[float]:
        """The advantage of every token (`len(token_ids)`): turn k's tokens get
        `turn_advantages[k]`, every other token `advantage` (they are masked out of the loss)."""
        out = [self.advantage] * len(self.token_ids)
        for (start, end), value in zip(self.turn_spans, self.turn_advantages, strict=False):
            out[start:end] = [value] * (end - start)
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["status"] = Status(d["status"])
        d["turn_spans"] = [tuple(s) for s in d.get("turn_spans", [])]
        return cls(**d)


@dataclass
class Group:
    """G trajectories of one task, scored together (the GRPO unit)."""

    task_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

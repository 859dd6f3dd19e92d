"""The run's rollout engines (one for training, one for held-out evaluation) and what each
finished episode records.

    engines = await build_engines(cfg, generate, envs, renderer, max_model_len)
    engines.train.run_group(task, seed, G)      engines.eval for `evaluate`
    record_episode(trajectory, counts)          metrics (reward, turns, tool calls, status)

An agent program (`env.id=agent:...`) talks to the policy through an OpenAI-compatible endpoint
started here; its engines turn each program run into one episode.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from forge_agent.evaluation import ScoreFn
from forge_agent.observability.metrics import record
from forge_agent.rollout import ChatRenderer, RolloutEngine
from forge_agent.run.config import AgentConfig
from forge_agent.types import Trajectory

logger = logging.getLogger(__name__)


@dataclass
class Engines:
    """The training and the evaluation engine, the agent endpoint they share and how eval
    episodes are scored (an agent program's reward runs in a reward actor; None: the env's)."""

    train: Any
    eval: Any
    endpoint: Any = None
    eval_score: ScoreFn | None = None

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()


async def build_engines(
    cfg: AgentConfig,
    generate: Any,
    envs: Any,
    renderer: ChatRenderer,
    max_model_len: int,
    agent_score: Callable[[list[Trajectory]], Awaitable[tuple[list[Trajectory], dict]]],
) -> Engines:
    """Rollout engines over `generate` and the env workers `envs`: training episodes sample at
    `rollout.temperature`, evaluation episodes at `eval.temperature`; both within the
    generator's context length `max_model_len`. `agent_score`: an agent program's reward (a
    reward actor call), for its eval episodes."""
    configs = [cfg.rollout, replace(cfg.rollout, temperature=cfg.eval.temperature)]
    if cfg.env.is_agent_program:
        from forge_agent.endpoint.agents import start_agent_engines

        endpoint, (train, evaluate) = await start_agent_engines(
            generate, envs, renderer, max_model_len, configs
        )
        return Engines(train, evaluate, endpoint, _agent_outcome(agent_score))
    train, evaluate = (
        RolloutEngine(generate, envs, renderer, c, max_model_len=max_model_len) for c in configs
    )
    return Engines(train, evaluate)


def record_episode(traj: Trajectory, counts: Counter[str]) -> None:
    """One finished training episode's metrics and counts."""
    counts[f"status/{traj.status.value}"] += 1
    counts["tool_errors"] += traj.tool_error_count
    if traj.info.get("reward_errors"):
        counts["reward_errors"] += 1
    record("reward/mean", traj.reward)
    record("episode/num_tokens", len(traj.token_ids))
    record("episode/turns", len(traj.turn_spans))
    record("tools/call_rate", float(traj.tool_call_count > 0))
    record("tools/errors", traj.tool_error_count, "sum")
    record(f"status/{traj.status.value}", 1, "sum")


def _agent_outcome(score: Callable[..., Awaitable[tuple[list[Trajectory], dict]]]) -> ScoreFn:
    """Eval episodes of an agent program get its own reward (the program's env gives none);
    shaping components are left out, as for env outcomes. A failed reward service leaves the
    episodes unscored and is counted (`eval/reward_service_error`)."""

    async def scored(trajectories: list[Trajectory]) -> list[Trajectory]:
        try:
            result, metrics = await score(trajectories)
        except Exception as exc:
            record("eval/reward_service_error", 1, "sum")
            logger.warning("scoring eval episodes failed: %s", exc)
            return trajectories
        for name, value in metrics.items():  # e.g. eval/reward/agent_reward/correct
            record(f"eval/{name}", value)
        return list(result)

    return scored

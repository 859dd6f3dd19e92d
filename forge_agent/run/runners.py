"""The run's rollout runners (one for training, one for held-out evaluation) and what each
finished episode records.

    env = ResolvedEnv.of(cfg.env)               # once, at setup
    config = cfg.runner_config()                # the driver hands each part its sections
    runners = await build_runners(config, env, generate, envs, renderer, max_model_len)
    runners = await build_run_runners(config, env, services, policy_path, max_model_len)  # a run
    runners.train.run_group(task, seed, G)      runners.eval for `evaluate`
    record_episode(trajectory, counts, errors)  metrics (reward, turns, tool calls, status)

`build_runners` is the one builder of the rollout runners: a run (`build_run_runners`, over its
services), `apps.eval` (an in-process engine) and the random-policy bench (a scripted generate
function) all build through it. An agent program (`env.id=agent:...`) talks to the policy
through an OpenAI-compatible endpoint started here; its runners turn each program run into one
episode.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_agent.endpoint.agents import start_agent_runners
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.evaluation import ScoreFn, evaluate
from forge_agent.models.tiny import load_tokenizer
from forge_agent.observability.metrics import INFRA_EXCLUDED, record
from forge_agent.rewards.build import AGENT_REWARD, build_rubric
from forge_agent.rollout import ChatRenderer, RolloutRunner, SessionRouter
from forge_agent.rollout.players import build_players
from forge_agent.run.config import RunnerConfig
from forge_agent.run.setup_checks import check_env_seats
from forge_agent.types import Trajectory

if TYPE_CHECKING:
    from forge_agent.env.protocol import EnvSource
    from forge_agent.generator.config import GenerateFn
    from forge_agent.run.services import Services
    from forge_agent.weights.protocol import WeightStore

logger = logging.getLogger(__name__)


@dataclass
class Runners:
    """The training and the evaluation runner, the agent endpoint they share and how eval
    episodes are scored (an agent program's reward runs in a reward actor; None: the env's)."""

    train: Any
    eval: Any
    endpoint: Any = None
    eval_score: ScoreFn | None = None

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()


async def build_runners(
    config: RunnerConfig,
    env: ResolvedEnv,
    generate: GenerateFn,
    envs: EnvSource,
    renderer: ChatRenderer,
    max_model_len: int,
    *,
    agent_score: ScoreFn | None = None,
    store: WeightStore | None = None,
    policy_path: Path | str | None = None,
    on_eval_trajectory: Callable[[Trajectory], None] | None = None,
    route_adapters: bool = True,
) -> Runners:
    """The rollout runners of `env` (the run's env, resolved) over `generate` (a generate
    function: the run's session router, an in-process engine, a scripted policy) and `envs`
    (its env source): training episodes sample at `rollout.temperature`, evaluation episodes
    at `config.eval_temperature`, both within the generator's context length `max_model_len`.

    An agent program (`env.id=agent:...`) gets an OpenAI-compatible endpoint over `generate`;
    its eval episodes are scored by `agent_score` (default: its reward function through the
    run's rubric, here: `agent_rubric_score`). `store` / `policy_path`: what snapshot and
    scripted seats read (multi-seat envs). `on_eval_trajectory`: called with each eval episode.
    `route_adapters`: episodes name the LoRA adapter `config.adapter_route` (a run's
    generators serve one per name; a single model evaluated alone does not).
    """
    rollout = config.rollout
    configs = [rollout, replace(rollout, temperature=config.eval_temperature)]
    if env.config.is_agent_program:
        endpoint, (train, evaluate) = await start_agent_runners(
            generate, envs, renderer, max_model_len, configs
        )
        evaluate.on_trajectory = on_eval_trajectory
        score = agent_score or agent_rubric_score(config, env)
        return Runners(train, evaluate, endpoint, score)
    route = config.adapter_route if route_adapters else None
    players = seat_players(config, env, store, policy_path, renderer)
    train, evaluate = (
        RolloutRunner(
            generate,
            envs,
            renderer,
            c,
            on_trajectory=on_eval_trajectory if c is configs[1] else None,
            max_model_len=max_model_len,
            adapter_field=route,
            players=players,
        )
        for c in configs
    )
    return Runners(train, evaluate)


async def build_run_runners(
    config: RunnerConfig,
    env: ResolvedEnv,
    services: Services,
    policy_path: Path | str,
    max_model_len: int,
    wrap: Callable[[Any], Any] = lambda generate: generate,
    wrap_envs: Callable[[Any], Any] = lambda envs: envs,
) -> Runners:
    """`build_runners` over a run's services: the generator replicas behind a session router
    (each episode stays on one replica), the env workers, the weight store (snapshot seats)
    and, for an agent program's eval episodes, the reward actors. `wrap` / `wrap_envs` wrap the
    generate function and the env source (step timing, fault injection in tests)."""

    return await build_runners(
        config,
        env,
        wrap(SessionRouter(list(services.generators))),
        wrap_envs(services.pool),
        ChatRenderer(load_tokenizer(policy_path), config.renderer),
        max_model_len,
        agent_score=_agent_outcome(functools.partial(services.score, components=[AGENT_REWARD])),
        store=getattr(services, "store", None),
        policy_path=policy_path,
    )


def agent_rubric_score(config: RunnerConfig, env: ResolvedEnv) -> ScoreFn:
    """An agent program's eval scoring without reward actors: the run's rubric
    (`build_rubric`, as the reward actors build it) with its `agent_reward` component only."""

    rubric = build_rubric(
        dict(config.reward_components),
        config.rollout.max_total_tokens,
        env.config.agent_reward,
        env.config.failure_reward,
    )

    async def score(trajectories: list[Trajectory]) -> list[Trajectory]:
        await rubric.score_all(trajectories, apply=True, only=[AGENT_REWARD])
        return trajectories

    return score


def seat_players(
    config: RunnerConfig,
    env: ResolvedEnv,
    store: WeightStore | None,
    policy_path: Path | str,
    renderer: ChatRenderer,
) -> dict | None:
    """Who plays each seat of a multi-seat env (`env.seats`); None for one-seat envs.
    Snapshot seats read `store` (the run's weight store)."""

    specs = check_env_seats(env, config.snapshot_versions)
    if not specs:
        return None
    return build_players(
        specs,
        store=store,
        model_path=policy_path,
        renderer=renderer,
        timeout_s=env.config.step_timeout_s,
        max_new_tokens=config.rollout.max_new_tokens_per_turn,
        temperature=config.rollout.temperature,
    )


async def evaluate_policy(
    runners: Runners, tasks: list[dict[str, Any]], k: int, seed: int, step: int
) -> tuple[dict[str, float], dict[str, str]]:
    """`k` episodes (`eval.k`) of each held-out task, seeded by `seed`; the report's metrics,
    recorded and printed
    (`[eval] step N: mean ..., pass@1 ..., tool_call_rate ...`, and a line per task kind when
    the tasks name one), and the first error text of each status (`EvalReport.first_errors`)."""

    score = runners.eval_score
    report = await evaluate(runners.eval, tasks, k, seed=seed, score=score)
    metrics = report.as_metrics()
    for name, value in metrics.items():
        record(name, value, "last")
    keys = ("eval/reward/mean", "eval/pass@1", "eval/tool_call_rate")
    line = ", ".join(f"{k.split('/')[-1]} {metrics[k]:.3f}" for k in keys if k in metrics)
    failures = [(report.policy_failures, "policy failures"), (report.infra_failures, "infra")]
    line += "".join(f", {n} {what}" for n, what in failures if n)
    print(f"[eval] step {step}: {line}", flush=True)
    for kind_line in report.kind_lines():  # tasks that name a kind (a template group)
        print(f"[eval] step {step}: {kind_line}", flush=True)
    return metrics, report.first_errors


def record_episode(
    traj: Trajectory, counts: Counter[str], errors: dict[str, str] | None = None
) -> None:
    """One finished training episode's metrics and counts; its error text (if it failed) as
    its status's last in `errors`."""
    counts[f"status/{traj.status.value}"] += 1
    if errors is not None and traj.info.get("error"):
        errors[traj.status.value] = str(traj.info["error"])[:500]
    counts["infra_excluded"] += traj.status.is_infra_failure  # left out of training
    counts["tool_errors"] += traj.tool_error_count
    if traj.info.get("reward_errors"):
        counts["reward_errors"] += 1
    record("reward/mean", traj.reward)
    record("episode/num_tokens", len(traj.token_ids))
    record("episode/turns", len(traj.turn_spans))
    record("tools/call_rate", float(traj.tool_call_count > 0))
    record("tools/errors", traj.tool_error_count, "sum")
    record(f"status/{traj.status.value}", 1, "sum")
    record(INFRA_EXCLUDED, float(traj.status.is_infra_failure), "sum")


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

"""Why a run has nothing to learn from, and what would help: the causes its stops name.

    facts = StopFacts(facts.env, facts.rollout, facts.warm_start, facts.model_name)  # the driver's
    check_start_signal(metrics, facts, params, errors)   # step 0: raises SetupError, or warns
    stop_cause(statuses, facts, errors, scope)           # mid-run: `run.failures.failed_part`

One table (`episode_cause`) says, for each status an episode can end with, what it means and
the key or code that fixes it, with the episode's error text. The step-0 check reads it for
the held-out episodes, the mid-run stop for the training episodes of the groups it dropped, so
an env whose step raises is named by its exception at step 0 and at step 300 alike. The model
is blamed only when the episodes ended `ok` with equal rewards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from forge_agent.env.config import EnvConfig
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.errors import SetupError
from forge_agent.rollout.config import RolloutConfig
from forge_agent.warm_start import demonstration_source
from forge_agent.warm_start.config import WarmStartConfig

__all__ = [
    "MIN_START_EPISODES",
    "StopFacts",
    "check_start_signal",
    "dominant_status",
    "episode_cause",
    "status_cause",
    "stop_cause",
    "teaching_help",
    "warm_start_kind",
]

MIN_START_EPISODES = 16
"""Held-out episodes the step-0 check needs before it stops a run (fewer: a warning line)."""


@dataclass(frozen=True)
class StopFacts:
    """What a stop's message names: the run's env and rollout limits, its warm start and model
    (the sections of the run's config a cause reads; the driver hands them over)."""

    env: EnvConfig
    rollout: RolloutConfig
    warm_start: WarmStartConfig
    model_name: str


def try_more(key: str, value: int | float, factor: int = 2) -> str:
    """`key is V: try key=V*factor`: a suggestion names the value in effect and a concrete next
    one, never the value in effect as the fix."""
    more = value * factor
    more = int(more) if float(more).is_integer() else round(more, 3)
    return f"{key} is {value}: try {key}={more}"


def episode_cause(
    status: str,
    facts: StopFacts,
    error: str | None = None,
    metrics: Mapping[str, float] | None = None,
) -> str:
    """What episodes that ended `status` say about the run, and the config key or code that
    fixes it; `error` is one such episode's error text (`Trajectory.info["error"]`); `metrics`
    (the evaluation's) add evidence where they have it (turns that fill the token cap)."""
    rollout, env = facts.rollout, facts.env.id
    said = f": {error}" if error else ""
    game = env.startswith("gymnasium:") or "gym_id" in facts.env.kwargs  # a GymnasiumAgentEnv
    causes = {
        "truncated_turns": "they ran out of turns: every episode is cut before it ends; "
        + try_more("rollout.max_turns", rollout.max_turns)
        + (", or end the game within them (env.kwargs.max_moves)" if game else ""),
        "truncated_length": "they ran out of tokens: "
        + try_more("rollout.max_new_tokens_per_turn", rollout.max_new_tokens_per_turn)
        + " (one turn), or "
        + try_more("rollout.max_total_tokens", rollout.max_total_tokens)
        + " (the whole episode)"
        + (
            ", or let a context strategy compact long transcripts "
            "(rollout.context.strategy=drop_tool_outputs)"
            if rollout.context.strategy == "keep"
            else ""
        ),
        "prompt_too_long": "their prompts alone fill the episode's tokens: "
        + try_more("rollout.max_total_tokens", rollout.max_total_tokens)
        + " (and generator.max_model_len), or shorten the env's prompts",
        "policy_error": f"env {env!r} raised on the policy's messages (its judge, step or a "
        f"tool){said}; fix the env's code (the error is the env's, not the model's), or raise "
        "forge_agent.errors.InfraError where the policy cannot have caused the failure (a "
        "backend that went away): such episodes end env_error and are left out of training",
        "policy_timeout": f"env {env!r} took too long to act on the policy's messages{said}; "
        + try_more("env.step_timeout_s", facts.env.step_timeout_s)
        + ", or make the env's step faster",
        "env_error": f"env {env!r} failed to start or reset (or its worker died){said}; fix "
        "the env (python -m apps.agent.main --check reports its setup)",
        "env_timeout": f"env {env!r} took too long to start, reset or close{said}; see "
        "env.reset_timeout_s",
        "generator_error": f"the generator failed{said}",
        "forfeit": "the seats left their games unfinished, each scored as a lost game "
        f"(rollout.forfeit_reward): a move cut at the turn's token cap "
        f"(rollout.max_new_tokens_per_turn is {rollout.max_new_tokens_per_turn}), or a seat out "
        f"of turns (rollout.max_turns is {rollout.max_turns}), forfeits"
        + _token_cap_evidence(metrics or {}, facts),
        "tampered": f"the policy's code interfered with env {env!r}'s grader{said}",
    }
    return causes.get(status, f"see traces.jsonl{said}")


def dominant_status(statuses: Mapping[str, int], failures_first: bool = False) -> str | None:
    """The status most of `statuses` (status -> episodes) ended with, when it is not `ok`; with
    `failures_first`, the most frequent status other than `ok` even when `ok` is more frequent
    (groups dropped for their failed members). None when `ok` wins, or there are none."""
    others = {s: n for s, n in statuses.items() if s != "ok" and n > 0}
    if not others:
        return None
    status = max(others, key=lambda s: (others[s], s))
    if failures_first or others[status] > statuses.get("ok", 0):
        return status
    return None


def _share(n: int, total: int) -> str:
    return f"all {n:,}" if n == total else f"{n:,} of {total:,}"


def status_cause(
    metrics: Mapping[str, float], facts: StopFacts, errors: Mapping[str, str] | None = None
) -> str | None:
    """Why most held-out episodes did not end normally (`episode_cause` of the most frequent
    status of `metrics`' `eval/status/<status>` counts, when it is not `ok`); `errors` gives
    each status's first error text (`EvalReport.first_errors`). None when `ok` wins."""
    counts = {
        k.removeprefix("eval/status/"): int(v)
        for k, v in metrics.items()
        if k.startswith("eval/status/")
    }
    status = dominant_status(counts)
    if status is None:
        return None
    head = f"{counts[status]} of {sum(counts.values())} held-out episodes ended {status}"
    return f"{head}: {episode_cause(status, facts, (errors or {}).get(status), metrics)}"


def _turn_tokens(metrics: Mapping[str, float]) -> float | None:
    """Mean sampled tokens per turn of the evaluation's episodes (None without the counts)."""
    turns = metrics.get("eval/turns/mean", 0.0)
    sampled = metrics.get("eval/sampled_tokens/mean")
    return sampled / turns if turns and sampled is not None else None


def _fills_token_cap(metrics: Mapping[str, float], facts: StopFacts) -> bool:
    """Most turns were cut at `rollout.max_new_tokens_per_turn` (mean >= 90% of it)."""
    per_turn = _turn_tokens(metrics)
    return per_turn is not None and per_turn >= 0.9 * facts.rollout.max_new_tokens_per_turn


def _token_cap_evidence(metrics: Mapping[str, float], facts: StopFacts) -> str:
    """`; their turns average N sampled tokens, the cap: ...` when turns fill the cap."""
    if not _fills_token_cap(metrics, facts):
        return ""
    return (
        f"; their turns average {_turn_tokens(metrics):.1f} sampled tokens, at the cap: raise "
        "rollout.max_new_tokens_per_turn, give the env a move format the model writes in fewer "
        "tokens (a tool with an enum argument), or demonstrations() of whole moves"
    )


def stop_cause(
    statuses: Mapping[str, int],
    facts: StopFacts,
    errors: Mapping[str, str] | None = None,
    scope: str = "training episodes",
    failures_first: bool = False,
) -> tuple[str, str] | None:
    """(status, cause) for a run that stopped mid-way: the dominant status of `statuses` (the
    dropped groups' episodes, status -> n), how many of `scope` ended with it, and
    `episode_cause` with its error text from `errors` (status -> the last error). None when
    most ended `ok` (`failures_first`: see `dominant_status`)."""
    status = dominant_status(statuses, failures_first)
    if status is None:
        return None
    head = f"{_share(statuses[status], sum(statuses.values()))} {scope} ended {status}"
    return status, f"{head}: {episode_cause(status, facts, (errors or {}).get(status))}"


def check_start_signal(
    metrics: dict[str, float],
    facts: StopFacts,
    model_params: int | None = None,
    errors: Mapping[str, str] | None = None,
    warm_start: str | None = None,
) -> None:
    """Stop a run at step 0 when its held-out episodes show RL has nothing to start from.

    Every scored episode of the step-0 evaluation earning no reward (all <= 0 and equal) means
    every training group will have zero variance: the run would only stop after
    `25 * groups_per_step` dropped groups. Every episode lost to infra (none scored) is
    the same. The cause is named: when most episodes did not end `ok`, their status and the
    key that fixes it (`status_cause`, with the first error text of `errors`); else what would
    help, by the evidence (`_model_cause`): the token budget when turns fill it, demonstrations
    when the warm start (`warm_start`: `warm_start_kind`; None: unknown) did not show the
    env's solved tasks, and only then the model, named with its size (`model_params`, e.g.
    HumanEval for the CPU default's 2.9 M parameters).
    Raises `SetupError`; with fewer than `MIN_START_EPISODES` episodes, or with a difficulty
    ladder whose first level is not the held-out tasks' (the ladder trains easier tasks than
    it evaluates), it only prints a warning.
    """
    scored = int(metrics.get("eval/scored_episodes", 0))
    episodes = int(metrics.get("eval/episodes", scored))
    best = metrics.get("eval/reward/max", 0.0)
    if scored == 0 and episodes > 0:
        cause = status_cause(metrics, facts, errors)
        if cause is None:
            return
        message = f"step 0: no held-out episode could be scored; {cause}"
        _stop_or_warn(message, episodes, facts)
        return
    if scored == 0 or best > 0.0:
        return
    if metrics.get("eval/reward/mean", 0.0) != best:
        return  # rewards differ (all negative but not equal): groups can carry signal
    cause = status_cause(metrics, facts, errors) or _model_cause(
        metrics, facts, model_params, warm_start
    )
    message = (
        f"step 0: all {scored} held-out episodes earned reward {best:g}, so every training "
        f"group would have zero variance and RL has no signal; {cause}"
    )
    _stop_or_warn(message, scored, facts)


def warm_start_kind(warm_start: WarmStartConfig, env: ResolvedEnv | None) -> str:
    """What the run's warm start taught: "off" (`warm_start.enabled=false` or no steps),
    "demonstrations" (the env's own), "tool schemas" (calls sampled from its tools' schemas:
    the call format, not the task), "none" (no demonstrations and no tools: skipped), or
    "unknown" (the env's hooks raised, or the run failed before `env`, `facts.env` resolved,
    existed)."""
    if not warm_start.enabled or warm_start.steps <= 0:
        return "off"
    if env is None:
        return "unknown"
    try:
        return demonstration_source(env) or "none"
    except Exception:
        return "unknown"


def teaching_help(facts: StopFacts, kind: str) -> str | None:
    """What would teach the policy the env's task, for a warm start of `kind`
    (`warm_start_kind`); None after a warm start on the env's own demonstrations."""
    env = facts.env.id
    helps = {
        "off": "the warm start is off (warm_start.enabled, warm_start.steps): turn it on, with "
        "`demonstrations()` of the env that solve its tasks (docs/envs.md)",
        "none": f"env {env!r} has neither demonstrations() nor tools, so nothing warm-started "
        "the policy: give it `demonstrations()` that solve its tasks (docs/envs.md)",
        "tool schemas": f"env {env!r} has no demonstrations(): its warm start taught only the "
        "tools' call format (calls sampled from their schemas), not the task; give it "
        "`demonstrations()` that solve its tasks (docs/envs.md), or more turns if a task "
        f"takes several calls ({try_more('rollout.max_turns', facts.rollout.max_turns)})",
        "unknown": "give the env `demonstrations()` that solve its tasks (docs/envs.md)",
    }
    return helps.get(kind)


def _model_cause(
    metrics: Mapping[str, float], facts: StopFacts, model_params: int | None, warm_start: str | None
) -> str:
    """Episodes that ended normally and earned nothing: what would help, in the order the
    evidence points. Turns that fill the per-turn token cap name the token budget; a warm start
    that was off, skipped or built from tool schemas only names demonstrations; the model's
    size is blamed only after a warm start on the env's own demonstrations (it saw solved
    tasks, with room to answer, and still earns nothing)."""
    env = facts.env.id
    model = f"model.name={facts.model_name}"
    if model_params:
        model += f", {model_params / 1e6:.1f} M parameters"
    kind = warm_start or "unknown"
    never_called = bool(
        metrics.get("eval/tools_offered") and metrics.get("eval/tool_call_rate", 0.0) == 0.0
    )
    head = (
        f"the policy never called a tool of env {env!r}: it has not learned their call format"
        if never_called
        else f"the policy never earned reward on env {env!r} (tool-call rate "
        f"{metrics.get('eval/tool_call_rate', 0.0):.2f})"
    )
    if _fills_token_cap(metrics, facts):
        return head + _token_cap_evidence(metrics, facts)
    advice = teaching_help(facts, kind)
    if advice is not None:  # no evidence against the model yet: what it was taught comes first
        return f"{head}. {advice}; the model's size is not the first suspect ({model})"
    if never_called:
        return (
            f"{head}, or the task is beyond this model ({model}): a warm start on its "
            "demonstrations did not teach it. Train the warm start longer ("
            f"{try_more('warm_start.steps', facts.warm_start.steps, 3)}), or use a larger model "
            "that calls tools (model.name; docs/envs.md says what size each shipped task needs)"
        )
    return (
        f"{head}: the task is beyond this model ({model}), as a warm start on its "
        "demonstrations did not carry over; use a larger model (model.name; docs/envs.md says "
        "what size each shipped task needs), easier tasks (env.kwargs, env.curriculum), or "
        f"train the warm start longer ({try_more('warm_start.steps', facts.warm_start.steps, 3)})"
    )


def _stop_or_warn(message: str, episodes: int, facts: StopFacts) -> None:
    """Raise `message` as a `SetupError`, or print it as a warning: with fewer than
    `MIN_START_EPISODES` episodes, or held-out tasks above a ladder's first level."""
    if episodes < MIN_START_EPISODES:
        print(f"warning: {message} (only {episodes} episodes: going on)", flush=True)
        return
    ladder = facts.env.curriculum
    if ladder.kwarg is not None and facts.env.kwargs.get(ladder.kwarg) != ladder.levels[0]:
        first = f"{ladder.kwarg}={ladder.levels[0]!r}"
        held_out = f"{ladder.kwarg}={facts.env.kwargs.get(ladder.kwarg)!r}"
        print(
            f"warning: {message} (held-out tasks are at {held_out}; the curriculum trains "
            f"from {first}: going on)",
            flush=True,
        )
        return
    raise SetupError(message)

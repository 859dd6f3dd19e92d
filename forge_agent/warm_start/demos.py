"""Demonstrations as trajectories: an env's conversations (its `demonstrations()`, or calls
sampled from its tool schemas) rendered exactly as a rollout would see them, so the loss mask
covers exactly the assistant's sampled tokens; and what the warm-started policy's longest
demonstrated turns say about the rollout's token limits (`demo_fit_warnings`).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge_agent.env.demonstrations import demonstrations_of
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.history import TokenHistory
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.toolkit.schema import ToolSchemaError
from forge_agent.types import Message, ToolSpec, Trajectory
from forge_agent.warm_start.schema_demos import schema_demonstrations

__all__ = [
    "DEMO_LENGTHS_FILE",
    "assistant_tokens",
    "demo_fit_warnings",
    "demo_lengths",
    "demo_trajectory",
    "demonstration_source",
    "demonstrations",
]


def demo_trajectory(
    renderer: ChatRenderer, messages: list[Message], tools: list[ToolSpec], task_id: str = "demo"
) -> Trajectory:
    """Token ids and loss mask of a whole conversation, as the policy would have produced it
    (written through the rollouts' token history: assistant turns are mask 1, version 0)."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    traj = Trajectory(task_id=task_id, group_id=task_id, messages=list(messages))
    history = TokenHistory(traj)
    history.start_segment(renderer.render_prompt(messages[:first], tools))
    i = first
    while i < len(messages):
        completion = assistant_tokens(renderer, history.prompt, messages[: i + 1], tools, task_id)
        history.record_turn(completion, [0.0] * len(completion), [0] * len(completion))
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j >= len(messages):
            break
        bridged = history.next_prompt(renderer, messages[i + 1 : j], tools)
        if bridged is None:
            raise ValueError(f"could not bridge demonstration {task_id!r} append-only")
        history.extend_to(bridged)
        i = j
    return traj


def assistant_tokens(
    renderer: ChatRenderer,
    context: list[int],
    messages: list[Message],
    tools: list[ToolSpec],
    task_id: str,
) -> list[int]:
    """The last assistant message as the policy would sample it after `context`: its text
    tokenized on its own (a full render may merge tokens across the prompt boundary), through
    the turn's stop token."""
    tok = renderer.tokenizer
    full_text = tok.decode(renderer.render_full(messages, tools))
    prefix = tok.decode(context)
    if not full_text.startswith(prefix):
        raise ValueError(f"renderer is not prefix-stable on demonstration {task_id!r}")
    completion = tok.encode(full_text[len(prefix) :], add_special_tokens=False)
    stop = next((k for k, t in enumerate(completion) if t in renderer.stop_token_ids), None)
    return completion if stop is None else completion[: stop + 1]


def demonstrations(
    env: ResolvedEnv, n: int, demo_fraction: float, seed: int
) -> tuple[list[list[Message]], list[ToolSpec]]:
    """`n` conversations of `env` from the env's `demonstrations(n, seed, demo_fraction)`
    hook, and the tool specs they were written against.

    Raises `EnvSetupError` when the env has none (`has_demonstrations` checks first).
    """
    convos = demonstrations_of(env, n, seed, demo_fraction)
    if not convos:  # an env without demonstrations: calls sampled from its tool schemas
        convos = schema_demonstrations(env, n, seed)
    if not convos:
        raise EnvSetupError(
            env.id,
            "its demonstrations()",
            "no demonstrations for the warm start and no tools to build them from (give the "
            "env class a `demonstrations(n, seed, demo_fraction)` method, or set "
            "warm_start.enabled=false)",
        )
    return [messages for messages, _ in convos], convos[0][1]


def demonstration_source(env: ResolvedEnv) -> str | None:
    """Where `env`'s warm start comes from: "demonstrations" (the env's own, or for an
    agent program those of its `tasks_from` env), "tool schemas" (`schema_demonstrations`:
    calls sampled from the env's tool schemas, for an env without demonstrations), or None
    (no demonstrations and no tools: the warm start is skipped)."""
    try:
        if demonstrations_of(env, 1, 0, 0.5):
            return "demonstrations"
        if schema_demonstrations(env, 1, 0):
            return "tool schemas"
    except EnvSetupError:
        raise
    except ToolSchemaError as exc:  # the env's tools, not its demonstrations(), are at fault
        raise EnvSetupError(env.id, "its tools", str(exc)) from exc
    except Exception as exc:  # a broken hook must not quietly skip the warm start
        raise EnvSetupError(
            env.id,
            "its demonstrations() (or a reset for demonstrations from its tool schemas)",
            f"raised {type(exc).__name__}: {exc!r} (fix the env, or set warm_start.enabled=false)",
        ) from exc
    return None


DEMO_LENGTHS_FILE = "demonstration_lengths.json"
"""Written into a warm-start folder: the longest demonstrated turn and episode, in tokens."""


def demo_lengths(demos: list[Trajectory]) -> dict[str, int]:
    """The longest assistant turn (a run of loss tokens, its stop token included) and the
    longest whole episode of the demonstrations, in tokens."""
    turn = episode = 0
    for traj in demos:
        episode = max(episode, len(traj.token_ids))
        run = 0
        for m in traj.loss_mask:
            run = run + 1 if m else 0
            turn = max(turn, run)
    return {"turn_tokens": turn, "episode_tokens": episode}


def demo_fit_warnings(policy: Path, rollout: RolloutConfig) -> list[str]:
    """What of the warm start's demonstrations the rollout limits cut off: a turn longer than
    `rollout.max_new_tokens_per_turn` or an episode longer than `rollout.max_total_tokens`
    (the policy is taught calls it is then never let finish: they end `truncated_length` and
    RL sees only the episodes that skip them; with a `rollout.context` strategy an episode is
    compacted, not cut). [] when they fit or the folder predates the record."""
    path = Path(policy) / DEMO_LENGTHS_FILE
    if not path.exists():
        return []
    lengths = json.loads(path.read_text())
    out = []
    for key, measured, what in (
        ("max_new_tokens_per_turn", lengths["turn_tokens"], "turn"),
        ("max_total_tokens", lengths["episode_tokens"], "episode"),
    ):
        limit = getattr(rollout, key)
        if key == "max_total_tokens" and rollout.context.strategy != "keep":
            continue  # a context strategy compacts an episode past the limit instead of cutting
        if measured > limit:
            out.append(
                f"rollout.{key}={limit} is shorter than the warm start's longest demonstrated "
                f"{what} ({measured} tokens): the policy's {what}s like it will be cut off "
                f"(truncated_length); set rollout.{key}={measured} or more"
            )
    return out

"""Checks of a run's inputs that need no actor: the env, its tasks, the model, prompt lengths.

    report = check_setup(cfg)             # raises a SetupError naming the input and the fix
    warning = check_prompt_lengths(env_id, env_kwargs, tasks, renderer, max_total_tokens)

`check_setup` is what `python -m apps.agent.main --check` runs, and what the app runs before
it starts anything, so a bad env id, env module, `env.kwargs`, data file or model name fails in
a second or two with one line (`forge_agent.errors.SetupError`). `check_prompt_lengths` needs
the policy's renderer (its tokenizer), so it runs once the model is known; it returns one
warning line when some tasks' prompts alone exceed `rollout.max_total_tokens` (those episodes
would end `prompt_too_long` without a single sampled token).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_agent.env.registry import env_spec
from forge_agent.env.sources import EnvSetupError

__all__ = [
    "SetupReport",
    "build_env",
    "check_prompt_lengths",
    "check_setup",
    "prompt_length_warning",
]

PROMPT_SAMPLE = 256
"""Tasks whose prompts `check_prompt_lengths` renders (the first ones of each split)."""


@dataclass
class SetupReport:
    """What `check_setup` found: task counts, the model folder and the tasks it loaded."""

    env_id: str
    task_source: str
    train_tasks: list[dict[str, Any]] = field(default_factory=list)  # up to PROMPT_SAMPLE
    eval_tasks: list[dict[str, Any]] = field(default_factory=list)
    model: Path | None = None  # None: the tiny model, built at setup

    def lines(self) -> list[str]:
        """A short human summary, one line per input."""
        model = str(self.model) if self.model is not None else "tiny (built locally)"
        return [
            f"env {self.env_id!r}: tasks from {self.task_source} ({len(self.train_tasks)} train "
            f"tasks read, {len(self.eval_tasks)} eval tasks)",
            f"model: {model}",
        ]


def build_env(env_id: str, env_kwargs: Mapping[str, Any]) -> Any:
    """An instance of `env_id` built with `env_kwargs`, in this process.

    A constructor that refuses the arguments (`TypeError`, `ValueError`, `KeyError`: most often
    `env.kwargs` meant for another env) raises `EnvSetupError` naming the env and the kwargs.
    """
    spec = env_spec(env_id)
    spec.factory()  # an env module that does not import fails here, named
    kwargs = dict(env_kwargs)
    try:
        return spec.make(**kwargs)
    except (TypeError, ValueError, KeyError) as exc:
        raise EnvSetupError(
            env_id,
            f"entry point {spec.entry_point!r}",
            f"cannot be built with env.kwargs={kwargs}: {type(exc).__name__}: {exc} "
            "(set env.kwargs to this env's constructor arguments, e.g. env.kwargs={})",
        ) from exc


def check_setup(cfg: Any) -> SetupReport:
    """Check an `AgentConfig`'s env, tasks and model as the run will use them; raises a
    `SetupError` (one line: the input and the fix) on the first problem.

    Loads up to `PROMPT_SAMPLE` training tasks and `eval.num_tasks` held-out tasks, as the
    controller does; resolves `model.name` (a
    folder or a cached hub name; the tiny model is not built here). Starts no actor.
    """
    from forge_agent.env.tasks import load_tasks, task_source

    env = cfg.env
    build_env(env.id, env.kwargs)  # only to check the constructor: nothing is started
    source = task_source(env.id, dict(env.kwargs), env.dataset, env.fields)
    train = load_tasks(
        env.id,
        "train",
        PROMPT_SAMPLE,
        env.train_seed,
        dict(env.kwargs),
        dataset=env.dataset,
        fields=env.fields,
    )
    evals = load_tasks(
        env.id,
        "eval",
        cfg.eval.num_tasks,
        env.eval_seed,
        dict(env.kwargs),
        dataset=env.dataset,
        fields=env.fields,
    )
    model = None
    if cfg.model.name != "tiny":
        from forge_agent.models.hub import resolve_model

        model = resolve_model(cfg.model.name)
    return SetupReport(env.id, source.describe(), train, evals, model)


def prompt_length_warning(
    lengths: Sequence[int], max_total_tokens: int, what: str = "tasks"
) -> str | None:
    """One warning line when some prompts (token counts in `lengths`) reach
    `max_total_tokens`: the share affected, the longest, and the key to raise; else None."""
    over = [n for n in lengths if n >= max_total_tokens]
    if not over:
        return None
    share = len(over) / len(lengths)
    return (
        f"{len(over)} of {len(lengths)} {what} ({share:.0%}) have prompts of "
        f">= rollout.max_total_tokens={max_total_tokens} tokens (longest {max(lengths)}): "
        "those episodes end prompt_too_long without sampling a token; raise "
        f"rollout.max_total_tokens (and generator.max_model_len) to at least {max(lengths) + 64}"
    )


def check_prompt_lengths(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    tasks: Sequence[dict[str, Any]],
    renderer: Any,
    max_total_tokens: int,
) -> str | None:
    """The `prompt_length_warning` for `tasks` (at most `PROMPT_SAMPLE` of them), or None.

    Renders each task's opening messages (`env.prompt(task)`, the `ToolEnv` hook) with the
    env's Python tools, as the rollout engine renders an episode's first prompt; tools an env
    learns only at reset (an MCP server's) are not counted, so the check can only under-count.
    Envs without a `prompt(task)` hook, or whose prompt or tools exist only after a reset, are
    not checked (None).
    """
    env = build_env(env_id, env_kwargs)
    prompt = getattr(env, "prompt", None)
    if not callable(prompt) or not tasks:
        return None
    from forge_agent.toolset import ToolSet

    get_tools = getattr(env, "get_tools", None)
    try:
        specs = ToolSet(get_tools()).specs if callable(get_tools) else []
        messages = [prompt(task) for task in list(tasks)[:PROMPT_SAMPLE]]
    except Exception:  # an env whose prompt or tools exist only after a reset (a Gymnasium game)
        return None
    lengths = [len(renderer.render_prompt(m, specs)) for m in messages]
    return prompt_length_warning(lengths, max_total_tokens, f"{env_id} tasks")

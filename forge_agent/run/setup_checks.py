"""Checks of a run's inputs that need no actor: the env, its tasks, the model, prompt lengths.

    report = check_setup(cfg)             # raises a SetupError naming the input and the fix
    warning = check_prompt_lengths(env, tasks, renderer, max_total_tokens)

`check_setup` is what `python -m apps.agent.main --check` runs, and what the app runs before
it starts anything, so a bad env id, env module, `env.kwargs`, data file or model name fails in
a second or two with one line (`forge_agent.errors.SetupError`). `check_prompt_lengths` needs
the policy's renderer (its tokenizer), so it runs once the model is known; it returns one
warning line when some tasks' prompts alone exceed `rollout.max_total_tokens` (those episodes
would end `prompt_too_long` without a single sampled token).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_agent.env.curriculum import check_curriculum
from forge_agent.env.protocol import env_seats
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.env.tasks import load_tasks, task_source
from forge_agent.errors import SetupError
from forge_agent.generator.config import on_cpu
from forge_agent.generator.engine_args import GeneratorError, lora_engine_args
from forge_agent.models.gguf import chat_template_source
from forge_agent.models.hub import resolve_model
from forge_agent.models.tiny import build_model
from forge_agent.rollout.players import check_seats
from forge_agent.toolkit.toolset import ToolSet
from forge_agent.trainer.checkpoint_dirs import complete_checkpoints
from forge_agent.typed_config import ConfigError

if TYPE_CHECKING:
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.run.config import AgentConfig

__all__ = [
    "SetupReport",
    "build_env",
    "check_lora",
    "check_prompt_lengths",
    "check_run_choices",
    "check_setup",
    "check_timeout_layers",
    "prompt_length_warning",
]

PROMPT_SAMPLE = 256
"""Tasks whose prompts `check_prompt_lengths` renders (the first ones of each split)."""


@dataclass
class SetupReport:
    """What `check_setup` found: task counts, the model folder and the tasks it loaded."""

    env: ResolvedEnv  # `cfg.env`, resolved once: what `--check` plays
    task_source: str
    train_tasks: list[dict[str, Any]] = field(default_factory=list)  # up to PROMPT_SAMPLE
    eval_tasks: list[dict[str, Any]] = field(default_factory=list)
    model: Path | None = None  # None: the tiny model, built at setup

    def lines(self) -> list[str]:
        """A short human summary, one line per input."""
        model = str(self.model) if self.model is not None else "tiny (built locally)"
        if self.model is not None:
            source = chat_template_source(self.model)
            model += f" ({source})" if source else ""
        return [
            f"env {self.env.id!r}: tasks from {self.task_source} ({len(self.train_tasks)} train "
            f"tasks read, {len(self.eval_tasks)} eval tasks)",
            f"model: {model}",
        ]


def build_env(env: ResolvedEnv) -> Any:
    """An instance of `env` built with its `env.kwargs`, here.

    A constructor that refuses the arguments (`TypeError`, `ValueError`, `KeyError`: most often
    `env.kwargs` meant for another env) raises `EnvSetupError` naming the env and the kwargs.
    """
    spec, kwargs = env.spec, env.kwargs
    spec.factory()  # an env module that does not import fails here, named
    try:
        return env.make()
    except EnvSetupError:  # the env named the problem itself (an unknown task, a bad key)
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise EnvSetupError(
            env.id,
            f"entry point {spec.entry_point!r}",
            f"cannot be built with env.kwargs={kwargs}: {type(exc).__name__}: {exc} "
            "(set env.kwargs to this env's constructor arguments, e.g. env.kwargs={})",
        ) from exc


def check_setup(cfg: AgentConfig) -> SetupReport:
    """Check an `AgentConfig`'s env, tasks and model as the run will use them; raises a
    `SetupError` (one line: the input and the fix) on the first problem.

    Loads up to `PROMPT_SAMPLE` training tasks and `eval.num_tasks` held-out tasks, as the
    controller does; resolves `model.name` (a
    folder or a cached hub name; the tiny model is not built here). Starts no actor.
    """
    resolved = ResolvedEnv.of(cfg.env)  # setup: the one lookup of env.id here
    env = resolved.config
    build_env(resolved)  # only to check the constructor: nothing is started
    source = task_source(resolved)
    train = load_tasks(resolved, "train", PROMPT_SAMPLE, env.train_seed)
    evals = load_tasks(resolved, "eval", cfg.eval.num_tasks, env.eval_seed)
    check_run_choices(cfg, resolved)
    model = None
    if cfg.model.name != "tiny":
        model = resolve_model(cfg.model.name, dtype=cfg.model.storage_dtype)
    check_lora(cfg, model)
    check_context_length(cfg, model)
    return SetupReport(resolved, source.describe(), train, evals, model)


def check_context_length(cfg: AgentConfig, model: Path | None) -> None:
    """`generator.max_model_len` within the positions the model has (`max_position_embeddings`):
    vLLM refuses a longer context only inside its engine process, as a traceback that ends in
    a pickling error. `model` None: the tiny model."""
    if model is None:
        positions = cfg.model.tiny_config().max_position_embeddings
        where = "the tiny model's (model.tiny.max_position_embeddings)"
    else:  # its config.json as written (a model whose config says nothing is not checked)
        try:
            positions = json.loads((Path(model) / "config.json").read_text()).get(
                "max_position_embeddings"
            )
        except (OSError, ValueError, AttributeError):
            positions = None
        where = f"{cfg.model.name}'s (max_position_embeddings in its config.json)"
    if positions is not None and cfg.generator.max_model_len > positions:
        raise SetupError(
            f"generator.max_model_len={cfg.generator.max_model_len} is longer than "
            f"{where} {positions} positions: set generator.max_model_len <= {positions}"
        )


class LoraSetupError(SetupError):
    """`trainer.lora` does not fit the model or the checkpoint a run resumes."""


def check_lora(cfg: AgentConfig, model: Path | None) -> None:
    """`trainer.lora` against the model and the checkpoint a resumed run continues, before any
    actor starts: target modules the model does not have (the error lists its linear modules),
    a rank above what vLLM serves (with `sync: adapter`), several adapters where one trainer
    proc or one endpoint cannot route them, and a LoRA checkpoint resumed as full
    weights or the reverse (or with another rank). The model is built on torch's meta device
    (no weights read). `model` None: the tiny model."""
    lora = cfg.trainer.lora
    if lora is not None:
        # imported here: torch and peft: +1.5 s at import, measured; only for LoRA or a resumed run
        from forge_agent.trainer.lora import check_target_modules

        if lora.sync == "adapter":
            try:
                lora_engine_args(lora)  # a rank vLLM can serve
            except GeneratorError as exc:
                raise LoraSetupError(str(exc)) from None

        try:
            check_target_modules(_meta_model(cfg, model), lora)
        except ValueError as exc:
            raise LoraSetupError(str(exc)) from None
        if len(lora.adapters) > 1 and cfg.services.trainer.procs > 1:
            raise LoraSetupError(
                f"trainer.lora.adapters {lora.adapters}: several adapters train on one trainer "
                f"proc, not on {cfg.services.trainer.procs} FSDP ranks (services.trainer.procs); "
                "set services.trainer.procs=1 or one adapter"
            )
        if lora.route == "seat":
            policy_seats = sorted(k for k, v in cfg.env.seats.items() if v == "policy")
            if not policy_seats or sorted(lora.adapters) != policy_seats:
                raise LoraSetupError(
                    f"trainer.lora.route=seat gives each policy seat the adapter of its name, so "
                    f"trainer.lora.adapters must be the policy seats of env.seats "
                    f"({policy_seats or 'none'}), not {lora.adapters}"
                )
        if len(lora.adapters) > 1 and cfg.env.is_agent_program:
            raise LoraSetupError(
                f"trainer.lora.adapters {lora.adapters}: an agent program's episodes "
                f"({cfg.env.id}) call the endpoint, which serves the first adapter only; "
                "use one adapter"
            )
    if cfg.checkpoint.resume:
        done = complete_checkpoints(Path(cfg.output_dir) / "checkpoints")
        if done:
            # imported here: torch and peft: +1.5 s at import, measured; only for LoRA or a resumed
            # run
            from forge_agent.trainer.lora import check_checkpoint_kind

            try:
                check_checkpoint_kind(done[-1] / "policy", lora)
            except ValueError as exc:
                raise LoraSetupError(str(exc)) from None


def _meta_model(cfg: AgentConfig, model: Path | None) -> Any:
    """The policy's module structure on the meta device (no memory, no weights read)."""
    import torch

    with torch.device("meta"):
        if model is None:
            tiny = cfg.model.tiny_config()
            return build_model(tiny, tiny.vocab_size)
        from transformers import AutoConfig, AutoModelForCausalLM

        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))


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
    env: ResolvedEnv,
    tasks: Sequence[dict[str, Any]],
    renderer: ChatRenderer,
    max_total_tokens: int,
) -> str | None:
    """The `prompt_length_warning` for `tasks` (at most `PROMPT_SAMPLE` of them), or None.

    Renders each task's opening messages (`env.prompt(task)`, the `ToolEnv` hook) with the
    env's Python tools, as the rollout runner renders an episode's first prompt; tools an env
    learns only at reset (an MCP server's) are not counted, so the check can only under-count.
    Envs without a `prompt(task)` hook, or whose prompt or tools exist only after a reset, are
    not checked (None).
    """
    env_id, env = env.id, build_env(env)
    prompt = getattr(env, "prompt", None)
    if not callable(prompt) or not tasks:
        return None

    get_tools = getattr(env, "get_tools", None)
    try:
        specs = ToolSet(get_tools()).specs if callable(get_tools) else []
        messages = [prompt(task) for task in list(tasks)[:PROMPT_SAMPLE]]
    except Exception:  # an env whose prompt or tools exist only after a reset (a Gymnasium game)
        return None
    lengths = [len(renderer.render_prompt(m, specs)) for m in messages]
    return prompt_length_warning(lengths, max_total_tokens, f"{env_id} tasks")


def check_run_choices(cfg: AgentConfig, resolved: ResolvedEnv) -> None:
    """Choices the env must support, refused before any actor starts: `advantages.turn_credit:
    gigpo` needs an env with `state_key()`; `env.curriculum` needs a kwarg the env takes and
    levels it accepts (`forge_agent.env.curriculum.check_curriculum`). `resolved`: `cfg.env`
    as the driver resolved it."""
    env = cfg.env
    if cfg.advantages.turn_credit == "gigpo" and not env.is_agent_program:
        built = build_env(resolved)
        if not callable(getattr(built, "state_key", None)):
            raise EnvSetupError(
                env.id,
                "advantages.turn_credit=gigpo",
                f"{type(built).__name__} has no state_key(): GiGPO groups turns by the env "
                "state they start from; give the env a `state_key(self) -> str`, or set "
                "advantages.turn_credit to none or discounted",
            )
    check_curriculum(resolved)
    check_env_seats(resolved, cfg.weight_store.max_versions)
    check_timeout_layers(resolved)


def check_timeout_layers(resolved: ResolvedEnv) -> None:
    """Timeouts in layers, tool < grader < step: a tool call that runs past its deadline comes
    back to the policy as an error observation, graded code that loops fails its tests, both
    inside `env.step_timeout_s` (a step past it is the policy's `policy_timeout`). Reads the env
    class's `tool_timeout_s` and `grader_timeout_s`; refuses a config that inverts them."""
    env = resolved.config
    if env.is_agent_program:
        return
    try:
        env_class = resolved.factory()
    except Exception:  # an env that cannot load fails later, naming itself
        return
    layers = [
        (f"{getattr(env_class, '__name__', env.id)}.{name}", getattr(env_class, name, None))
        for name in ("tool_timeout_s", "grader_timeout_s")
    ]
    layers = [(name, float(v)) for name, v in layers if isinstance(v, int | float)]
    layers.append(("env.step_timeout_s", float(env.step_timeout_s)))
    for (inner, inner_s), (outer, outer_s) in itertools.pairwise(layers):
        if inner_s >= outer_s:
            raise EnvSetupError(
                env.id,
                "env.step_timeout_s",
                f"timeouts must nest, tool < grader < step: {inner} is {inner_s:g} s, not "
                f"below {outer} ({outer_s:g} s); set env.step_timeout_s above "
                f"{max(s for _, s in layers[:-1]):g}",
            )


def check_colocation_device(colocate: str) -> None:
    """`services.colocate: sleep` needs a CUDA device here (vLLM's sleep mode); a
    `ConfigError` naming the key, and the CPU stand-in, where there is none. Checked when a run
    starts, not by `--check` (a GPU config is checked on any machine)."""
    if colocate == "sleep" and on_cpu():
        raise ConfigError(
            "services.colocate=sleep needs a CUDA device (vLLM's sleep mode) and this machine "
            "has none; on CPU use services.colocate=standin (a stand-in that makes the same "
            "calls in the same order and frees nothing) or services.colocate=off"
        )


def check_env_seats(resolved: ResolvedEnv, snapshot_versions: int) -> dict[str, Any]:
    """`env.seats` against the seats the env declares (every seat has a player, none unknown,
    snapshots the weight store keeps: `snapshot_versions`, `weight_store.max_versions`); a
    multi-seat env without `env.seats` is refused too. The parsed player specs ({} for a
    one-seat env)."""
    env = resolved.config
    if env.is_agent_program:
        declared: tuple[str, ...] = ()
    else:
        try:
            declared = env_seats(resolved.factory())
        except Exception:  # an env that cannot load fails later, naming itself
            return {}
    if not declared and not env.seats:
        return {}
    if declared and not env.seats:
        raise EnvSetupError(env.id, "env.seats", f"the env has seats {list(declared)}; say who "
                            "plays each, e.g. env.seats.player_0=policy")  # fmt: skip
    try:
        return check_seats(env.seats, declared, env.id, snapshot_versions)
    except ValueError as exc:
        raise EnvSetupError(env.id, "env.seats", str(exc)) from exc

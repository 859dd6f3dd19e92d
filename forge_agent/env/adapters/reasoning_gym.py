"""reasoning-gym's procedural task generators as agent envs: `env.id=reasoning_gym:<task>`.

    python -m apps.agent.main env.id=reasoning_gym:basic_arithmetic \
        'env.kwargs={min_terms: 2, max_terms: 3, tools: ["tools.calculator:calculator"]}'

- tasks: the generator itself (`reasoning_gym.create_dataset(task, seed=, size=, **config)`);
  `env.kwargs` are its config (`min_terms`, `max_digits`, ...), checked against the task's
  config class when the env is built. Train and eval tasks never share a question (a hash of
  the question picks the split) and come from different seeds.
- reward: the task's own scorer (`dataset.score_answer(answer, entry)`), as `{"score": s}`.
  The answer is the text inside the last `<answer>...</answer>` of the final message, or the
  whole final message when it has no tags. Several scorers `eval` or `sympy.parse_expr` the
  answer, so every verdict runs sandboxed (`forge_agent.rewards.judge`), never in the env
  worker: a scorer that raises, dies or runs out of memory on the answer is `policy_error`,
  one past `grader_timeout_s` is `policy_timeout`; a score outside [0, 1] is clipped. Those
  scorers are split (`reasoning_gym_scorers`): the sandbox gets the answer and what the
  question states, reports what the answer computes, and the comparison with the key
  happens here; the other scorers only compare text and get the whole entry.
- several tasks: `reasoning_gym:composite` with
  `datasets: [{name: leg_counting}, {name: basic_arithmetic, weight: 2, config: {...}}]`.
- difficulty: `level=k` starts from reasoning-gym's own curriculum for the task at global
  level k (explicit config keys win), so `env.curriculum: {kwarg: level, levels: [0, 1, 2]}`
  is a difficulty ladder; any numeric config key (`max_terms`) can be the ladder's kwarg too.
- tools (optional): `tools=["tools.calculator:calculator"]` (any "module:function" tool);
  a tool that takes `sandbox` runs in a bubblewrap sandbox per episode. Warm-start
  demonstrations call a tool when the task's metadata holds its one argument (the calculator
  and basic_arithmetic's `expression`) and the tool's output is the answer.

Bad input is an `EnvSetupError` before training: reasoning-gym not installed (with the pip
command), an unknown task (with near matches), an unknown config key (with the task's keys).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from forge_agent.env.protocol import ToolEnv
from forge_agent.env.registry import UnknownEnvError, load_entry_point
from forge_agent.env.sources import EnvSetupError, Split, holdout
from forge_agent.rewards.judge import JUDGE_LIMITS, ScorerRef, judge_server
from forge_agent.rewards.reasoning_gym_scorers import SPLIT_SCORERS, redacted, split_scorer
from forge_agent.sandbox import make_sandbox
from forge_agent.types import Message, ToolSpec

__all__ = ["PIP_INSTALL", "ReasoningGymEnv", "extract_answer", "reasoning_gym_tasks", "scorer"]

PIP_INSTALL = "pip install reasoning-gym==0.1.25  (or: pip install -e '.[ecosystems]')"

SYSTEM_PROMPT = "Answer the question. Reply with only the final answer inside <answer></answer>."
TOOL_PROMPT = " You may call the tools first."

_ANSWER = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_RUN_KEYS = ("seed", "size")  # set per block of tasks, never from env.kwargs


def extract_answer(text: str) -> str:
    """The answer of a final message: the last `<answer>...</answer>`, else the whole text."""
    found = _ANSWER.findall(text)
    return (found[-1] if found else text).strip()


def _reasoning_gym(env_id: str) -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise EnvSetupError(
            env_id,
            "reasoning_gym",
            f"the reasoning-gym package is not installed ({exc}): {PIP_INSTALL}",
        ) from exc
    return reasoning_gym


def scorer(task: str, config: dict[str, Any]) -> Callable[[str, Any], float]:
    """The scorer of `task` under `config` (`score_answer(answer, entry)`), as the judge
    server builds it: its `ScorerRef` is `forge_agent.env.adapters.reasoning_gym:scorer`."""
    import reasoning_gym

    return reasoning_gym.create_dataset(task, seed=0, size=1, **config).score_answer


def reasoning_gym_tasks() -> list[str]:
    """The task names of the installed reasoning-gym."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


class ReasoningGymEnv(ToolEnv):
    """One reasoning-gym task generator, scored by its own `score_answer`.

    Args:
        task: the generator's name (`basic_arithmetic`, `leg_counting`, ...; the id's suffix).
        level: start from reasoning-gym's curriculum for `task` at this global level.
        tools: tools the model may call, as "module:function" entry points.
        sandbox_backend: the sandbox of tools that take one ("bwrap" or "docker").
        **config: the task's config (its dataclass fields other than seed and size).
    """

    required_fields = ("prompt", "answer", "entry")
    tool_timeout_s = 10.0
    grader_timeout_s = JUDGE_LIMITS.wall_s

    def __init__(
        self,
        task: str,
        level: int | None = None,
        tools: Sequence[str] = (),
        sandbox_backend: str = "bwrap",
        **config: Any,
    ) -> None:
        self.env_id = f"reasoning_gym:{task}"
        rg = _reasoning_gym(self.env_id)
        from reasoning_gym.factory import CURRICULA, DATASETS

        if task not in DATASETS:
            near = difflib.get_close_matches(task, DATASETS, n=5, cutoff=0.5)
            raise UnknownEnvError(
                self.env_id,
                "reasoning_gym",
                f"reasoning-gym has no task {task!r}"
                + (f"; near matches: {', '.join(near)}" if near else "")
                + f" ({len(DATASETS)} tasks: reasoning_gym.factory.DATASETS)",
            )
        self.task_name = task
        config_cls = DATASETS[task][1]
        fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in _RUN_KEYS]
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise EnvSetupError(
                self.env_id,
                "env.kwargs",
                f"{', '.join(map(repr, unknown))} is not a setting of reasoning-gym's {task!r}; "
                f"its settings: {', '.join(fields)} (and level, tools, sandbox_backend)",
            )
        base: dict[str, Any] = {}
        if level is not None:
            if task not in CURRICULA:
                raise EnvSetupError(
                    self.env_id, "env.kwargs.level", f"reasoning-gym's {task!r} has no curriculum"
                )
            curriculum = rg.factory.create_curriculum(task)
            try:
                curriculum.set_global_level(int(level))
            except Exception as exc:
                raise EnvSetupError(
                    self.env_id,
                    "env.kwargs.level",
                    f"level {level!r} is rejected by reasoning-gym's curriculum: {exc}",
                ) from exc
            generated = curriculum.generate_configuration({})
            base = {k: getattr(generated, k) for k in fields}
        self.level = level
        self.config = {**base, **config}
        if task == "composite" and isinstance(self.config.get("datasets"), list):
            from reasoning_gym.composite import DatasetSpec  # its specs, from YAML mappings

            self.config["datasets"] = [
                DatasetSpec(**{"weight": 1.0, "config": {}, **d}) if isinstance(d, dict) else d
                for d in self.config["datasets"]
            ]
        try:  # the config class checks its values; build one task to surface a bad one now
            self._scorer = rg.create_dataset(task, seed=0, size=1, **self.config)
        except Exception as exc:
            raise EnvSetupError(
                self.env_id, "env.kwargs", f"reasoning-gym refused the config: {exc}"
            ) from exc
        self._scorer_ref = ScorerRef(f"{__name__}:scorer", (task, self.config))
        self._inside_ref = ScorerRef(
            "forge_agent.rewards.reasoning_gym_scorers:inside_scorer", (task, self.config)
        )
        sources = _sources(task, self.config)
        self._refs = [
            *([self._scorer_ref] if sources - set(SPLIT_SCORERS) else []),
            *([self._inside_ref] if sources & set(SPLIT_SCORERS) else []),
        ]  # the scorers this env's tasks use, built at reset
        self.tool_paths = [str(t) for t in tools]
        self._tools = [_load_tool(self.env_id, path) for path in self.tool_paths]
        self.sandbox_backend = sandbox_backend
        self._backend: Any = None
        self.system_prompt = SYSTEM_PROMPT + (TOOL_PROMPT if self._tools else "")

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        # the judge server starts and builds the scorers here, under the reset's deadline
        for ref in self._refs:
            await judge_server().prepare(ref)
        return await super().reset(task, seed)

    # ------------------------------------------------------------------ tasks and scoring
    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """The `split` share of `n` generated problems; the question decides the split."""
        import reasoning_gym

        dataset = reasoning_gym.create_dataset(self.task_name, seed=seed, size=n, **self.config)
        made = [
            {
                "task_id": f"{self.task_name}/{seed}/{i}",
                "prompt": entry["question"],
                "answer": str(entry["answer"]),
                "entry": entry,
            }
            for i, entry in enumerate(dataset)
        ]
        return holdout(made, split, key=lambda t: f"{self.env_id}:{t['prompt']}")

    def default_task(self, seed: int) -> dict[str, Any]:
        return (self.tasks("train", 8, seed) or self.tasks("eval", 8, seed))[0]

    async def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        given = extract_answer(answer)
        entry = self.task["entry"]
        split = split_scorer(entry)
        if split is None:  # a scorer that only compares text: the whole entry
            verdict = await judge_server().score(self._scorer_ref, given, entry)
        else:  # the answer and what the question states go in; the key stays here
            value = await judge_server().value(self._inside_ref, given, redacted(entry))
            verdict = split.outside(value, given, entry)
        score = min(max(verdict, 0.0), 1.0)
        outcome = "correct" if score >= 1.0 else ("partial" if score > 0 else "wrong")
        info = {"outcome": outcome, "answer": given[:200], "expected": self.task["answer"][:200]}
        if self._tools:
            info["used_tool"] = sum(self.toolset.call_counts.values()) > 0
        return {"score": score}, info

    # ------------------------------------------------------------------ tools and sandbox
    def get_tools(self) -> list[Callable[..., Any]]:
        return list(self._tools)

    def make_sandbox(self) -> Any:
        if not any(_takes_sandbox(tool) for tool in self._tools):
            return None
        if self._backend is None:
            self._backend = make_sandbox(self.sandbox_backend)
        return self._backend.session()

    async def close(self) -> None:
        await super().close()
        if self._backend is not None:
            self._backend.close()

    # ------------------------------------------------------------------ warm start
    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[Message]]:
        """Correct answers to generated training tasks; when a tool can solve a task from its
        metadata (see the module docstring), a `demo_fraction` share calls it first."""
        rng = random.Random(seed)
        demos: list[list[Message]] = []
        block = seed
        while len(demos) < n:
            for task in self.tasks("train", max(n, 8), 7919 + block):
                call = self._tool_call(task["entry"]) if rng.random() < demo_fraction else None
                demos.append(self._demo(task, call))
                if len(demos) == n:
                    break
            block += 1
        return demos

    def _tool_call(self, entry: dict[str, Any]) -> tuple[str, dict[str, Any], str] | None:
        """(tool, arguments, output) of a call whose output is `entry`'s answer, or None."""
        metadata = entry.get("metadata") or {}
        for tool in self._tools:
            if _takes_sandbox(tool):
                continue
            params = [p for p in _signature(tool).parameters.values() if p.default is p.empty]
            if len(params) != 1 or params[0].name not in metadata:
                continue
            args = {params[0].name: metadata[params[0].name]}
            try:
                output = str(tool(**args))
            except Exception:
                continue
            if float(self._scorer.score_answer(output, entry)) >= 1.0:
                return tool.__name__, args, output
        return None

    def _demo(self, task: dict[str, Any], call: tuple[str, dict, str] | None) -> list[Message]:
        convo: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task["prompt"]},
        ]
        if call is not None:
            name, args, output = call
            convo.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                }
            )
            convo.append(
                {"role": "tool", "tool_call_id": "call_0", "name": name, "content": output}
            )
        convo.append({"role": "assistant", "content": f"<answer>{task['answer']}</answer>"})
        return convo


def _sources(task: str, config: dict[str, Any]) -> set[str]:
    """The tasks whose scorers score `task`'s entries (a composite's: its datasets')."""
    if task != "composite":
        return {task}
    return {d.name if hasattr(d, "name") else d["name"] for d in config.get("datasets") or ()}


def _signature(fn: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(fn)


def _takes_sandbox(tool: Callable[..., Any]) -> bool:
    return "sandbox" in _signature(tool).parameters


def _load_tool(env_id: str, path: str) -> Callable[..., Any]:
    try:
        tool = load_entry_point(path)
    except (ImportError, AttributeError, ValueError) as exc:
        msg = f"tool {path!r} does not import: {exc}"
        raise EnvSetupError(env_id, "env.kwargs.tools", msg) from exc
    if not callable(tool):
        raise EnvSetupError(env_id, "env.kwargs.tools", f"tool {path!r} is not a function")
    return tool

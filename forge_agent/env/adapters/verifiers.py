"""An installed `verifiers` environment as an agent env: `env.id=verifiers:<module>`.

    python -m apps.agent.main env.id=verifiers:my_vf_env 'env.kwargs={num_train_examples: 200}'

`<module>` is what `verifiers.load_environment(<module>, **env.kwargs)` loads: an importable
module (an installed environment package, or a module of yours) whose `load_environment(...)`
returns a verifiers `Environment` (single-turn, multi-turn or tool env; verifiers' classic
API, `verifiers.legacy`). What maps to what:

- tasks: its `dataset` rows are the training tasks, its `eval_dataset` rows the held-out ones
  (without one, a hash of each row's prompt and answer splits the dataset): a finite dataset,
  epoch by epoch. A row's `prompt` is already formatted by verifiers (system prompt, few-shot).
- the episode: verifiers' own `rollout()` runs, unchanged: its `setup_state`, `env_response`
  (tool calls through its tools, a game's replies), stop conditions and `max_turns`. The model
  it calls is the policy: each generation request of the rollout becomes this env's reply to
  forge-agent (the new env messages), and the policy's next assistant message is the answer
  to that request. So multi-turn and tool environments play exactly as under verifiers.
- tools: its tool definitions become `ToolSpec`s; verifiers' `env_response` answers the calls
  through `forge_agent.env.adapters.verifiers_tools.ToolGuard`: arguments checked against the
  schema, each call run in a forked sandbox of a tool server (no network, the sandbox user, rlimits,
  `tool_timeout_s`), a failed call an error observation that no rubric pays for
  (environments whose tools need Prime's remote sandboxes cannot run here).
- reward: at the end of the rollout its rubric scores it (`rubric.score_rollout`, with its
  parser and class objects), in a judge's sandbox (`verifiers_rubric`: its functions read,
  and some `eval`, the policy's answer), except a rubric that asks a model (`JudgeRubric`):
  refused unless `allow_model_judge=true`, then scored in the env worker; every reward
  function of weight w != 0 is a component
  `{name: w * score}` (their sum is verifiers' reward); weight-0 metrics go to
  `info["metrics"]`. The parser is the environment's own, used by its rubric functions.
  Group-level reward functions (scored over a group of rollouts) are refused at build time.

Bad input is an `EnvSetupError` before training: verifiers not installed (with the pip
command), a module that does not import (with near matches among installed environments),
`load_environment` failing on `env.kwargs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import importlib.util
import json
import time
import uuid
import weakref
from typing import Any

from forge_agent.env.adapters.verifiers_tools import ToolGuard
from forge_agent.env.protocol import Env
from forge_agent.env.registry import UnknownEnvError
from forge_agent.env.sources import Dataset, EnvSetupError
from forge_agent.errors import InfraError, PolicyTimeout
from forge_agent.rewards.judge import JudgeError, judge_server
from forge_agent.rewards.verifiers_rubric import (
    asks_a_model,
    capped_metrics,
    rubric_ref,
    sandboxed_scores,
    signal_handlers_kept,
)
from forge_agent.types import Message, StepResult, ToolSpec

__all__ = ["PIP_INSTALL", "VerifiersEnv"]

PIP_INSTALL = "pip install verifiers==0.3.1  (or: pip install -e '.[ecosystems]')"
MODEL_NAME = "forge-agent-policy"


def _verifiers(env_id: str) -> Any:
    try:
        import verifiers
    except ImportError as exc:
        raise EnvSetupError(
            env_id, "verifiers", f"the verifiers package is not installed ({exc}): {PIP_INSTALL}"
        ) from exc
    return verifiers


def _module_exists(name: str) -> bool:
    try:
        return bool(name) and importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def _modules_near(name: str) -> list[str]:
    """Importable modules whose names are close to `name` (siblings of a dotted name)."""
    import pkgutil

    parent, _, _ = name.rpartition(".")
    if parent and _module_exists(parent):
        spec = importlib.util.find_spec(parent)
        paths = spec.submodule_search_locations or [] if spec else []
        names = [f"{parent}.{m.name}" for m in pkgutil.iter_modules(paths)]
    else:
        names = [m.name for m in pkgutil.iter_modules()]
    return difflib.get_close_matches(name, names, n=5, cutoff=0.6)


def _to_dict(message: Any) -> Message:
    """A verifiers message (pydantic) as an OpenAI-style dict."""
    data = (
        message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    )
    out: Message = {"role": data["role"], "content": data.get("content") or ""}
    if data.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in data["tool_calls"]
        ]
    if data.get("tool_call_id"):
        out["tool_call_id"] = data["tool_call_id"]
    return out


def _reward_weights(rubric: Any) -> dict[str, float]:
    """Function name -> weight over a rubric and, for a group, its member rubrics."""
    weights: dict[str, float] = {}
    for member in getattr(rubric, "rubrics", None) or [rubric]:
        if getattr(member, "rubrics", None):
            weights.update(_reward_weights(member))
            continue
        for func, weight in zip(member.funcs, member.weights, strict=True):
            name = getattr(func, "__name__", repr(func))
            weights[name] = weights.get(name, 0.0) + float(weight)
    return weights


@functools.cache
def _policy_client_class(vf: Any) -> type:
    """A verifiers `Client` whose model is forge-agent's policy: a generation request goes on
    `requests` (`VerifiersEnv` returns it as the env's messages) and is answered by the
    assistant message that arrives on `replies`. The client's provider hooks are never used."""

    class PolicyClient(vf.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(None)
            self.requests: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
            self.replies: asyncio.Queue[Message] = asyncio.Queue()

        async def get_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            await self.requests.put(("generate", (prompt, tools or [])))
            message = await self.replies.get()
            calls = [
                vf.types.ToolCall(
                    id=str(call.get("id") or f"call_{i}"),
                    name=str(call["function"]["name"]),
                    arguments=call["function"].get("arguments") or "{}",
                )
                for i, call in enumerate(message.get("tool_calls") or [])
            ]
            reply = vf.types.ResponseMessage(
                content=message.get("content") or "",
                tool_calls=calls or None,
                finish_reason="tool_calls" if calls else "stop",
                is_truncated=False,
            )
            return vf.types.Response(
                id=uuid.uuid4().hex, created=int(time.time()), model=model, message=reply
            )

        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, *args, **kwargs):
            raise NotImplementedError("the policy answers get_response itself")

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self):
            return None

    return PolicyClient


class VerifiersEnv(Env):
    """One verifiers environment, played through its own rollout and scored by its rubric.

    Args:
        module: the environment module `verifiers.load_environment` imports (the id's suffix).
        **env_args: the keyword arguments of its `load_environment`.
    """

    required_fields = ("prompt",)
    tool_timeout_s = 20.0  # one tool call (below `env.step_timeout_s`: timeouts nest)

    def __init__(self, module: str, allow_model_judge: bool = False, **env_args: Any) -> None:
        self.env_id = f"verifiers:{module}"
        vf = _verifiers(self.env_id)
        name = module.replace("-", "_").split("/")[-1]  # as verifiers.load_environment does
        if not _module_exists(name):
            near = _modules_near(name)
            raise UnknownEnvError(
                self.env_id,
                "verifiers",
                f"no installed module {name!r} to load a verifiers environment from"
                + (f"; near matches: {', '.join(near)}" if near else "")
                + " (install the environment's package, or put your module on PYTHONPATH)",
            )
        try:
            with signal_handlers_kept():
                self.vf_env = vf.load_environment(module, **env_args)
        except Exception as exc:
            cause = exc.__cause__ or exc
            raise EnvSetupError(
                self.env_id,
                f"{name}.load_environment",
                f"failed with env.kwargs={env_args}: {type(cause).__name__}: {cause}",
            ) from exc
        self._vf = vf
        rubric = self.vf_env.rubric
        if rubric.has_group_rewards:  # a property of verifiers' Rubric
            raise EnvSetupError(
                self.env_id,
                "rubric",
                "group-level reward functions (scored over a group of rollouts) are not "
                "supported: each episode is scored on its own",
            )
        self.weights = _reward_weights(rubric)
        self.module, self.env_args = module, env_args
        self.sandboxed_rubric = not asks_a_model(rubric)  # a model judge needs the network
        if not self.sandboxed_rubric and not allow_model_judge:
            raise EnvSetupError(
                self.env_id,
                "rubric",
                "it asks a model (verifiers' JudgeRubric), which needs the network the judge "
                "sandbox does not have, so the whole rubric would be scored in the env worker, "
                "on the host (a reward function of it that evaluates the answer would run "
                "there); set env.kwargs.allow_model_judge=true to score it there",
            )
        self.tools: ToolGuard | None = None
        if callable(getattr(self.vf_env, "call_tool", None)):  # a ToolEnv: calls guarded
            self.tools = ToolGuard(self.vf_env, module, env_args, self.tool_timeout_s)
            self.vf_env.call_tool = self.tools.call_tool  # the hook its env_response calls
            weakref.finalize(self, self.tools.close)
        self._capped: dict[str, float] = {}
        self._client: Any = None
        self._rollout: asyncio.Task | None = None
        self._seen = 0

    # ------------------------------------------------------------------ tasks
    def _rows(self, dataset: Any, split: str) -> list[dict[str, Any]]:
        return [
            {
                "task_id": f"{self.env_id}/{split}/{row.get('example_id', i)}",
                "prompt": [m if isinstance(m, dict) else _to_dict(m) for m in row["prompt"]],
                "answer": row.get("answer", ""),
                "info": row.get("info") or {},
                "vf_task": row.get("task"),
                "example_id": row.get("example_id", i),
            }
            for i, row in enumerate(dataset if dataset is not None else [])
        ]

    @functools.cached_property
    def dataset(self) -> Dataset:  # type: ignore[override]
        """Its `dataset` rows for training and its `eval_dataset` rows held out (without one,
        a hash of each row's prompt and answer splits the dataset)."""
        train = self._rows(self.vf_env.get_dataset(), "train")
        held = None
        if self.vf_env.eval_dataset is not None:
            held = self._rows(self.vf_env.get_eval_dataset(), "eval")
        key = lambda t: json.dumps([t["prompt"], t["answer"]], default=str)  # noqa: E731
        return Dataset(train, key=key, eval_source=held)

    def default_task(self, seed: int) -> dict[str, Any]:
        tasks = list(self.dataset.source)
        return tasks[seed % len(tasks)]

    # ------------------------------------------------------------------ episodes
    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        await self.close()
        if self.tools is not None:
            self.tools.failed.clear()
        self._capped = {}
        if self.sandboxed_rubric:  # the judge server loads the environment now, not in a step
            await judge_server().prepare(rubric_ref(self.module, self.env_args))
        self._client = _policy_client_class(self._vf)()
        prompt = task["prompt"]
        rollout_input = {
            "prompt": prompt,
            "example_id": task.get("example_id", 0),
            "answer": task.get("answer", ""),
            "info": task.get("info") or {},
        }
        if isinstance(task.get("vf_task"), dict):
            rollout_input["task"] = task["vf_task"]
        self._rollout = asyncio.ensure_future(self._play(rollout_input))
        kind, payload = await self._client.requests.get()
        if kind != "generate":
            self._raise_unless_generate(kind, payload)
        prompt_messages, tool_defs = payload
        messages = [_to_dict(m) for m in prompt_messages]
        self._seen = len(messages)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in tool_defs
        ]
        return messages, tools

    async def _play(self, rollout_input: dict[str, Any]) -> None:
        client = self._client
        assert client is not None
        try:
            state = await self.vf_env.rollout(rollout_input, client, MODEL_NAME, {})
            failed = self.tools.failed if self.tools is not None else set()
            if self.sandboxed_rubric:
                metrics, reward, capped = await sandboxed_scores(
                    self.module, self.env_args, state, failed
                )
                state["metrics"], state["reward"], self._capped = metrics, reward, capped
            else:
                await self.vf_env.rubric.score_rollout(state)
                if failed:  # failed calls pay nothing
                    self._capped = await capped_metrics(self.vf_env.rubric, state, failed)
            await client.requests.put(("done", state))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaces in reset/step as the env's failure
            await client.requests.put(("error", exc))

    def _raise_unless_generate(self, kind: str, payload: Any) -> None:
        if kind == "error" and isinstance(payload, InfraError | PolicyTimeout | JudgeError):
            raise payload  # its blame is its own (a judge's sandbox, or its verdict)
        if kind == "error":
            raise RuntimeError(f"{self.env_id}: the verifiers rollout failed: {payload!r}")
        raise RuntimeError(f"{self.env_id}: the rollout ended before the model was asked")

    async def step(self, assistant_message: Message) -> StepResult:
        if self._client is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        if self.tools is not None:
            self.tools.note_unparsed(assistant_message)
        await self._client.replies.put(dict(assistant_message))
        kind, payload = await self._client.requests.get()
        if self.tools is not None and self.tools.infra is not None:
            infra, self.tools.infra = self.tools.infra, None
            raise infra
        if kind == "error":
            self._raise_unless_generate(kind, payload)
        if kind == "generate":
            messages = [_to_dict(m) for m in payload[0]]
            new = messages[self._seen + 1 :]  # after the assistant message just sent
            self._seen = len(messages)
            _name_tool_messages(new, assistant_message)
            return StepResult(
                messages=new, info={"tool_calls": len(assistant_message.get("tool_calls") or [])}
            )
        state = payload
        final = [_to_dict(m) for m in (state.get("final_env_response") or [])]
        metrics = dict(state.get("metrics") or {})
        rewards = {
            name: min(
                weight * float(metrics.get(name, 0.0)),
                weight * float(self._capped.get(name, metrics.get(name, 0.0))),
            )
            for name, weight in self.weights.items()
            if weight != 0.0
        }
        info = {
            "outcome": state.get("stop_condition") or "completed",
            "metrics": {k: float(v) for k, v in metrics.items() if self.weights.get(k, 0) == 0},
            "vf_reward": float(state.get("reward") or 0.0),
            "tool_calls": len(assistant_message.get("tool_calls") or []),
            "failed_tool_calls": len(self.tools.failed) if self.tools is not None else 0,
        }
        if state.get("error") is not None:
            info["vf_error"] = repr(state["error"])[:300]
        return StepResult(messages=final, rewards=rewards, done=True, info=info)

    async def close(self) -> None:
        rollout, self._rollout = self._rollout, None
        if rollout is not None and not rollout.done():
            rollout.cancel()
            with contextlib.suppress(BaseException):  # the cancelled rollout's own end
                await rollout
        self._client = None


def _name_tool_messages(messages: list[Message], assistant: Message) -> None:
    """Name tool messages after the call they answer (forge-agent's tool messages carry it)."""
    names = {c.get("id"): c["function"]["name"] for c in assistant.get("tool_calls") or []}
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in names:
            message["name"] = names[message["tool_call_id"]]

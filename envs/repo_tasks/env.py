"""The repo_tasks env: fix a bug or add a feature in a small repository, in a sandbox.

The episode's workspace is the task's repository snapshot. Tools: `list_files`,
`search_files`, `read_file`, `edit_file`, `write_file` and `shell` (run a command, e.g.
`python3 -m unittest`), all inside the episode's sandbox with code_exec's limits. The final
message (one without tool calls) ends the episode; then the repository as the episode left it
is graded in a FRESH sandbox against hidden tests that were never in the workspace
(`grading.py`). Rewards: `{"resolved": 1.0}` when every fail-to-pass and pass-to-pass test
passes (SWE-bench's "resolved"), else 0. Info: `outcome` ("resolved" | "unresolved" |
"no_change" | "error" | "workspace_too_large"), `fail_to_pass` / `pass_to_pass` ("k/n"
passed), `used_tool`.

Tasks: the project's Harbor task folders in `tasks/` (default), any folder of Harbor tasks
(`tasks=PATH`), or a json/jsonl file of SWE-bench-style instances whose repositories are local
(`instances=PATH`). Before training, every task is checked once per process: its oracle patch
must earn the reward and the untouched repository must not; a task that fails either is an
`EnvSetupError` naming it and the failing tests. With `sandbox_backend="docker"`, the image a
Harbor task's Dockerfile starts FROM must be on the engine (nothing is pulled); its RUN steps
are built there, offline (bubblewrap refuses a task with RUN steps, naming the line).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
from collections.abc import Callable
from typing import Any

from envs.repo_tasks.formats import (
    TaskFormatError,
    apply_patch,
    load_harbor_tasks,
    load_swebench_instance,
)
from envs.repo_tasks.grading import GradeResult, WorkspaceTooLarge, grade_files, read_workspace
from forge_agent.env import Dataset, EnvSetupError, ToolEnv, in_eval_split
from forge_agent.errors import TamperingError
from forge_agent.sandbox import Limits, Sandbox, SandboxError, make_sandbox
from forge_agent.types import Message
from tools.files import read_file, write_file
from tools.repo import edit_file, list_files, search_files
from tools.shell import shell

__all__ = ["DEFAULT_TASKS", "RepoTaskEnv", "check_task", "load_repo_tasks"]

ENV_ID = "repo_tasks"
DEFAULT_TASKS = os.path.join(os.path.dirname(__file__), "tasks")

SYSTEM_PROMPT = (
    "You work in a Python repository. Use the tools to read, search and edit its files and to "
    "run commands (python3 -m unittest). Reply without a tool call when the change is done."
)


@functools.lru_cache(maxsize=8)
def _load(tasks: str | None, instances: str | None) -> tuple[dict[str, Any], ...]:
    try:
        if instances:
            with open(instances) as f:
                text = f.read()
            rows = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [json.loads(line) for line in text.splitlines() if line.strip()]
            )
            return tuple(load_swebench_instance(row) for row in rows)
        return tuple(load_harbor_tasks(tasks or DEFAULT_TASKS))
    except TaskFormatError as exc:
        raise EnvSetupError(ENV_ID, exc.task, exc.problem) from exc
    except OSError as exc:
        raise EnvSetupError(ENV_ID, str(instances or tasks), str(exc)) from exc


def load_repo_tasks(tasks: str | None = None, instances: str | None = None) -> list[dict]:
    """The tasks of a Harbor folder (default: the shipped ones) or an instances file."""
    return [dict(t) for t in _load(tasks, instances)]


GRADE_WALL_S = 20.0
"""The longest a hidden-test run may take (a task's own verifier timeout is capped to it): graded
code that loops fails its tests inside the step's deadline (`RepoTaskEnv.grader_timeout_s`)."""


def _test_limits(task: dict[str, Any]) -> Limits:
    limits = task.get("limits") or {}
    wall_s = min(float(limits.get("wall_s", 60.0)), GRADE_WALL_S)
    return Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=int(limits.get("memory_mb", 512)))


def grade_task(
    task: dict[str, Any],
    files: dict[str, str],
    backend: Sandbox,
    expected: dict[str, dict[int, int]] | None = None,
) -> GradeResult:
    """The hidden tests of `task` run over the repository `files`; `expected`: how many times
    each test's checks fired on the oracle patch (`oracle_fired`)."""
    return grade_files(
        files,
        task["hidden_tests"],
        task["fail_to_pass"],
        task["pass_to_pass"],
        backend,
        _test_limits(task),
        expected,
    )


_FIRED: dict[str, dict[str, dict[int, int]] | None] = {}


def oracle_fired(task: dict[str, Any], backend: Sandbox) -> dict[str, dict[int, int]] | None:
    """How many times each check of each wanted test fires on the task's oracle patch (once
    per process; `check_task` fills it too). None for a task without an oracle patch (its
    checks' must-run rule is then the test body's own top level). Raises `EnvSetupError` when
    the oracle does not resolve the task."""
    key = _fingerprint(task, type(backend).__name__)
    if key not in _FIRED:
        if not task.get("oracle_patch"):
            _FIRED[key] = None
        else:
            try:
                fixed = apply_patch(task["files"], task["oracle_patch"])
            except ValueError as exc:
                raise EnvSetupError(
                    ENV_ID, task["task_id"], f"the oracle patch does not apply: {exc}"
                ) from exc
            oracle = grade_task(task, fixed, backend)
            if not oracle.resolved:
                why = oracle.error or "; ".join(oracle.failing()[:3])
                raise EnvSetupError(
                    ENV_ID, task["task_id"], f"its tests fail on the oracle patch: {why}"
                )
            _FIRED[key] = oracle.fired
    return _FIRED[key]


def check_task(task: dict[str, Any], backend: Sandbox) -> tuple[float, float]:
    """Check that the oracle patch earns the reward and the untouched repository does not.

    Returns the seconds each grading took (oracle, no-op). Raises `EnvSetupError` naming the
    task and the cause.
    """
    import time

    name = task["task_id"]
    if not task.get("oracle_patch"):
        raise EnvSetupError(ENV_ID, name, "the task has no oracle patch (solution/*.patch)")
    try:
        fixed = apply_patch(task["files"], task["oracle_patch"])
    except ValueError as exc:
        raise EnvSetupError(ENV_ID, name, f"the oracle patch does not apply: {exc}") from exc
    start = time.perf_counter()
    oracle = grade_task(task, fixed, backend)
    oracle_s = time.perf_counter() - start
    if not oracle.resolved:
        why = oracle.error or "; ".join(oracle.failing()[:3])
        raise EnvSetupError(ENV_ID, name, f"its tests fail on the oracle patch: {why}")
    _FIRED[_fingerprint(task, type(backend).__name__)] = oracle.fired
    start = time.perf_counter()
    noop = grade_task(task, dict(task["files"]), backend, oracle.fired)
    noop_s = time.perf_counter() - start
    if noop.error is not None:
        raise EnvSetupError(ENV_ID, name, f"its tests cannot run: {noop.error}")
    listed = bool(task["fail_to_pass"])  # else every hidden test is wanted: some may pass
    passing = sorted(noop.passed_ids & set(noop.fail_to_pass)) if listed else []
    if noop.resolved or passing:
        raise EnvSetupError(
            ENV_ID,
            name,
            "its tests pass on the untouched repository (fail-to-pass tests that pass: "
            f"{', '.join(passing) or 'all'})",
        )
    broken = [t for t in noop.pass_to_pass if t not in noop.passed_ids]
    if broken:
        raise EnvSetupError(
            ENV_ID, name, f"pass-to-pass tests fail on the untouched repository: {broken[:3]}"
        )
    return oracle_s, noop_s


_CHECKED: set[str] = set()


def _fingerprint(task: dict[str, Any], backend: str) -> str:
    blob = json.dumps(task, sort_keys=True, default=str) + backend
    return hashlib.sha256(blob.encode()).hexdigest()


class RepoTaskEnv(ToolEnv):
    """Repository tasks with sandboxed file and shell tools and hidden-test rewards.

    Args:
        tasks: a folder of Harbor task folders (default: the shipped `tasks/`).
        instances: a json or jsonl file of SWE-bench-style instances (local repositories).
        sandbox_backend: "bwrap" (default) or "docker".
        docker_url: the Docker engine's URL (default: the environment's).
        verify_oracles: check every task's oracle and no-op once before its tasks are used.
        tool_limits: limits of each tool run (default: code_exec's).
    """

    tools = (list_files, search_files, read_file, edit_file, write_file, shell)
    system_prompt = SYSTEM_PROMPT
    tool_timeout_s = 15.0  # above a tool run's 10 s sandbox wall, which reports it first
    grader_timeout_s = 25.0  # the hidden-test run's sandbox wall (GRADE_WALL_S) and its start
    required_fields = ("task_id", "prompt", "files", "hidden_tests")

    def __init__(
        self,
        tasks: str | None = None,
        instances: str | None = None,
        sandbox_backend: str = "bwrap",
        docker_url: str | None = None,
        verify_oracles: bool = True,
        tool_limits: Limits | None = None,
    ) -> None:
        self.task_source, self.instances = tasks, instances
        self.sandbox_backend, self.docker_url = sandbox_backend, docker_url
        self.verify_oracles = verify_oracles
        self.tool_limits = tool_limits or Limits(wall_s=10, cpu_s=10, memory_mb=512)
        self._backends: dict[str, Sandbox] = {}

    # ---------------------------------------------------------------- tasks
    def all_tasks(self) -> list[dict[str, Any]]:
        """Every task of the source, each checked (oracle earns, no-op does not) once."""
        tasks = load_repo_tasks(self.task_source, self.instances)
        if self.verify_oracles:
            for task in tasks:
                key = _fingerprint(task, self.sandbox_backend)
                if key not in _CHECKED:
                    check_task(task, self.backend_for(task))
                    _CHECKED.add(key)
        return tasks

    @functools.cached_property
    def dataset(self) -> Dataset:  # type: ignore[override]
        """The checked tasks; a hash of the task id puts a fifth of them in the eval split."""
        return Dataset(self.all_tasks(), key=_split_key)

    def default_task(self, seed: int) -> dict[str, Any]:
        tasks = load_repo_tasks(self.task_source, self.instances)
        return tasks[seed % len(tasks)]

    # ---------------------------------------------------------------- sandbox
    def backend_for(self, task: dict[str, Any]) -> Sandbox:
        """The sandbox backend of `task`: bwrap on the host's files, or Docker on the image its
        environment names (built on the engine when its Dockerfile has RUN steps)."""
        build = task.get("build") or {}
        if self.sandbox_backend != "docker":
            if build:
                raise EnvSetupError(
                    ENV_ID,
                    task["task_id"],
                    f"its environment needs a build step (Dockerfile {build['runs'][0]}), "
                    "which only the Docker backend runs (sandbox_backend=docker)",
                )
            return self._backend("", {})
        image = task.get("image") or ""
        base = self._backend(image, task)
        if not build:
            return base
        tag = (
            "forge-repo-task-"
            + hashlib.sha256(
                json.dumps([image, build, task["files"]], sort_keys=True).encode()
            ).hexdigest()[:16]
            + ":local"
        )
        if tag not in self._backends:
            try:
                base.client.images.build(
                    path=build["context"], tag=tag, pull=False, network_mode="none", rm=True
                )
            except Exception as exc:  # docker.errors.BuildError / APIError
                raise EnvSetupError(
                    ENV_ID,
                    task["task_id"],
                    f"its environment does not build on this Docker engine (offline, FROM "
                    f"{image!r}): {exc}",
                ) from exc
        return self._backend(tag, task)

    def _backend(self, image: str, task: dict[str, Any]) -> Sandbox:
        if image not in self._backends:
            kwargs: dict[str, Any] = {}
            if self.sandbox_backend == "docker":
                kwargs["base_url"] = self.docker_url
                if image:
                    kwargs["image"] = image
            try:
                self._backends[image] = make_sandbox(self.sandbox_backend, **kwargs)
            except SandboxError as exc:
                raise EnvSetupError(
                    ENV_ID,
                    task.get("task_id", "?"),
                    f"its environment cannot be built with the {self.sandbox_backend} "
                    f"backend here: {exc}",
                ) from exc
        return self._backends[image]

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> Any:
        self._expected = await asyncio.to_thread(oracle_fired, task, self.backend_for(task))
        return await super().reset(task, seed)

    def make_sandbox(self) -> Any:
        session = self.backend_for(self.task).session(self.tool_limits)
        for path, text in self.task["files"].items():
            session.write_file(path, text)
        return session

    # ---------------------------------------------------------------- reward
    async def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        task = self.task
        info: dict[str, Any] = {"used_tool": sum(self.toolset.call_counts.values()) > 0}
        try:
            files = await asyncio.to_thread(read_workspace, self.sandbox)
        except WorkspaceTooLarge as exc:
            info["outcome"] = "workspace_too_large"
            info["error"] = str(exc)
            return {"resolved": 0.0}, info
        backend = self.backend_for(task)
        expected = getattr(self, "_expected", None)
        result = await asyncio.to_thread(grade_task, task, files, backend, expected)
        f2p, p2p = task["fail_to_pass"] or result.fail_to_pass, task["pass_to_pass"]
        info["fail_to_pass"] = f"{result.passed(f2p)}/{len(f2p)}"
        info["pass_to_pass"] = f"{result.passed(p2p)}/{len(p2p)}"
        if result.tampered is not None:
            raise TamperingError(f"the hidden-test run was tampered with: {result.tampered}")
        if result.error is not None:
            info.update(outcome="error", error=result.error)
        elif result.resolved:
            info["outcome"] = "resolved"
        elif files == task["files"]:
            info["outcome"] = "no_change"
        else:
            info["outcome"] = "unresolved"
            info["failures"] = result.failing()[:3]
        return {"resolved": float(result.resolved)}, info

    async def close(self) -> None:
        await super().close()
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()

    # ---------------------------------------------------------------- warm start
    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[Message]]:
        """Solved episodes from the oracle patches of the training tasks: list the files,
        write each file the patch changes, then finish (a `1 - demo_fraction` share skips the
        listing)."""
        rng = random.Random(seed)
        tasks = [
            t
            for t in self.all_tasks()
            if t.get("oracle_patch") and not in_eval_split(_split_key(t))
        ]
        demos = []
        for k in range(n):
            task = tasks[k % len(tasks)]
            demos.append(_oracle_demo(self.prompt(task), task, rng.random() < demo_fraction))
        return demos


def _split_key(task: dict[str, Any]) -> str:
    return f"{ENV_ID}:{task['task_id']}"


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _oracle_demo(prompt: list[Message], task: dict[str, Any], explore: bool) -> list[Message]:
    fixed = apply_patch(task["files"], task["oracle_patch"])
    changed = sorted(p for p in fixed if fixed[p] != task["files"].get(p))
    convo: list[Message] = list(prompt)
    steps: list[tuple[str, dict[str, Any], Callable[[], str]]] = []
    if explore:
        listing = "\n".join(sorted(task["files"]))
        steps.append(("list_files", {"path": "."}, lambda: listing))
    for path in changed:
        size = len(fixed[path].encode("utf-8"))
        steps.append(
            (
                "write_file",
                {"path": path, "content": fixed[path]},
                lambda path=path, size=size: f"Wrote {size} bytes to {path}",
            )
        )
    for i, (name, args, reply) in enumerate(steps):
        call_id = f"call_{i}"
        convo.append(
            {"role": "assistant", "content": "", "tool_calls": [_call(call_id, name, args)]}
        )
        convo.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": reply()})
    convo.append({"role": "assistant", "content": "Done."})
    return convo

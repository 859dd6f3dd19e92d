"""The code_exec env: hidden tests in a fresh sandbox decide the reward."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from envs.code_exec import CodeExecEnv, extract_code, load_tasks

try:
    from sandbox_fixtures import unfiltered_prlimit
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import unfiltered_prlimit  # noqa: F401

pytestmark = pytest.mark.timeout(120)


def task_named(entry_point: str) -> dict[str, Any]:
    return next(t for t in load_tasks() if t["entry_point"] == entry_point)


def answer(code: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Here is my solution.\n```python\n{code}```"}


def final_result(task: dict[str, Any], turns: list[dict[str, Any]]) -> Any:
    async def main() -> Any:
        env = CodeExecEnv()
        try:
            await env.reset(task, seed=0)
            for turn in turns:
                result = await env.step(turn)
            return result
        finally:
            await env.close()

    return asyncio.run(main())


def test_shipped_dataset_loads_through_datasets_with_decoded_tests() -> None:
    tasks = load_tasks()
    assert 20 <= len(tasks) <= 40
    for task in tasks:
        assert {"task_id", "entry_point", "prompt", "tests"} <= set(task)
        assert isinstance(task["tests"], list) and task["tests"]


def test_reference_solution_after_running_code_passes_every_test() -> None:
    task = task_named("factorial")
    run = {
        "id": "c1",
        "type": "function",
        "function": {
            "name": "python",
            "arguments": json.dumps({"code": task["reference"] + "print(factorial(5))"}),
        },
    }

    async def main() -> tuple[Any, Any]:
        env = CodeExecEnv()
        await env.reset(task, seed=0)
        tool_turn = await env.step({"role": "assistant", "content": "", "tool_calls": [run]})
        final = await env.step(answer(task["reference"]))
        await env.close()
        return tool_turn, final

    tool_turn, final = asyncio.run(main())
    assert "120" in tool_turn.messages[0]["content"]
    assert final.rewards == {"tests_passed": 1.0}
    assert final.info["outcome"] == "passed" and final.info["used_tool"] is True


def test_wrong_solution_earns_the_fraction_of_tests_it_passes() -> None:
    final = final_result(task_named("factorial"), [answer("def factorial(n):\n    return 1\n")])
    assert final.rewards == {"tests_passed": pytest.approx(2 / 5)}  # 0! and 1! are 1
    assert final.info["outcome"] == "partial"


def test_printing_the_expected_output_earns_nothing() -> None:
    task = task_named("add_numbers")
    prints = "".join(f"print({t['expected']!r})\n" for t in task["tests"])
    code = f"def add_numbers(a, b):\n    {prints.strip().replace(chr(10), chr(10) + '    ')}\n"
    final = final_result(task, [answer(code)])
    assert final.rewards == {"tests_passed": 0.0}


def test_editing_the_tests_during_the_episode_changes_nothing() -> None:
    task = task_named("add_numbers")
    tamper = (
        "import os\n"
        "for name in ('tests.py', 'inputs.json', 'test_solution.py'):\n"
        "    open(name, 'w').write('print(\"all tests passed\")')\n"
        "print(os.listdir('.'))\n"
    )
    call = {
        "id": "t",
        "type": "function",
        "function": {"name": "python", "arguments": {"code": tamper}},
    }
    wrong = "def add_numbers(a, b):\n    return 0\n"
    final = final_result(task, [{"role": "assistant", "tool_calls": [call]}, answer(wrong)])
    assert final.rewards["tests_passed"] == pytest.approx(2 / 5)  # -5 + 5 and 0 + 0 are 0


def test_solution_that_rewrites_the_test_inputs_or_exits_early_earns_nothing() -> None:
    task = task_named("is_prime")
    for code in (
        "open('inputs.json', 'w').write('[]')\ndef is_prime(n):\n    return None\n",
        "import sys\nprint('OK ' * 100)\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
    ):
        final = final_result(task, [answer(code)])
        assert final.rewards == {"tests_passed": 0.0}, code


def test_solution_that_fakes_equality_earns_nothing() -> None:
    code = (
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "def is_even(n):\n    return Anything()\n"
    )
    final = final_result(task_named("is_even"), [answer(code)])
    assert final.rewards == {"tests_passed": 0.0}


STARVES_ITS_SUPERVISOR = """
import os, resource
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (1 << 20, 1 << 20))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (4, 4))
    except OSError:
        pass
os.write(2, b"x" * 200_000)
def is_even(n):
    return n % 2 == 1
"""


@pytest.mark.parametrize("filtered", [True, False], ids=["filter", "no_prlimit_rule"])
def test_a_wrong_solution_that_starves_its_supervisor_ends_scored_not_as_an_infra_failure(
    request: pytest.FixtureRequest, filtered: bool
) -> None:
    """The episode ends normally with reward 0 (an env error would be an infra status,
    excluded from baselines and loss), whether the filter stops the attack or not."""
    if not filtered:
        request.getfixturevalue("unfiltered_prlimit")
    final = final_result(task_named("is_even"), [answer(STARVES_ITS_SUPERVISOR)])
    assert final.done and final.rewards == {"tests_passed": 0.0}, final.info
    assert final.info["outcome"] in ("failed", "error"), final.info


def test_answer_without_code_block_is_no_code() -> None:
    final = final_result(task_named("gcd"), [{"role": "assistant", "content": "I give up."}])
    assert final.rewards == {"tests_passed": 0.0} and final.info["outcome"] == "no_code"


def test_extract_code_takes_the_last_python_block() -> None:
    text = "```python\nA = 1\n```\ntext\n```py\nB = 2\n```"
    assert extract_code(text) == "B = 2\n"
    assert extract_code("def f(x):\n    return x", "f") == "def f(x):\n    return x"
    assert extract_code("no code here", "f") is None


class _SupervisorStarvingPolicy:
    """A scripted generator (the controller's `generate_wrapper`): every episode answers with
    the wrong solution above that tries to starve its sandbox's supervisor."""

    def __init__(self, tokenizer: Any) -> None:
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        text = answer(STARVES_ITS_SUPERVISOR)["content"]
        self.ids = [*tokenizer.encode(text, add_special_tokens=False), end]

    async def __call__(self, ids: list[int], sampling: Any, session: str) -> Any:
        from forge_agent.types import Completion

        return Completion(list(self.ids), [-1.0] * len(self.ids), "stop", 0)


def test_in_a_training_step_the_attack_is_a_scored_wrong_answer(
    policy_model_path, tiny_tokenizer, tmp_path
) -> None:
    """Through the whole stack (env workers, sandboxes, reward actor, trainer): episodes whose
    code tries to lower its supervisor's limits end `ok` with reward 0, count in their group's
    baseline and are trained on; none ends as an excluded infra failure."""
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import train

    out = tmp_path / "run"
    overrides = [
        f"model.name={policy_model_path}",
        "warm_start.enabled=false",
        f"output_dir={out}",
        "env.id=code_exec",
        "env.kwargs={}",
        "training.steps=1",
        "training.groups_per_step=1",
        "training.group_size=2",
        "advantages.drop_zero_variance=false",
        "eval.every=0",
        "checkpoint.every=0",
        "services.env.num_replicas=1",
        "generator.max_model_len=2048",
        "rollout.max_total_tokens=2048",
        "rollout.max_new_tokens_per_turn=1024",
        "trainer.row_tokens=2048",
        "metrics.console=false",
    ]
    policy = _SupervisorStarvingPolicy(tiny_tokenizer)
    summary = asyncio.run(train(load_config(None, overrides), generate_wrapper=lambda _: policy))
    assert summary["steps"] == 1
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 2
    assert {t["status"] for t in traces} == {"ok"}, [t["status"] for t in traces]
    assert all(t["reward"] == 0.0 for t in traces)
    assert "resource.prlimit" in (out / "traces.jsonl").read_text()  # the attack was sampled
    counts = summary["counts"]
    assert not any(k.startswith("status/") and k != "status/ok" for k in counts), counts

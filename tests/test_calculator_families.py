"""The calculator env's task families (issue 59: word problems, dependent calls, mixed tasks
where some need no tool): held out by template, correct demonstrations that replay through the
env to reward 1, the tools whose replies must be read, and the evaluator's per-kind report."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from envs.calculator import CalculatorEnv
from envs.calculator.families import (
    FAMILIES,
    NEEDLESS_CALL_REWARD,
    SANDBOX_LIMITS,
    demonstration,
    generate_family_tasks,
    make_sandbox,
    templates,
)
from forge_agent.evaluation import EvalReport, evaluate, kind_drop_warnings, kind_regressions
from forge_agent.toolkit import tool_spec
from forge_agent.types import Completion, Group, Status, Trajectory
from tools.calculator import calculator, calculator_without_example
from tools.python import python, python_without_example


def _call(name: str, **arguments) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": function}]}


async def _replay(env, task, convo):
    """Step `env` with the conversation's assistant messages: (the env's tool replies, the
    conversation's, the final step)."""
    await env.reset(task, 0)
    got, want, result = [], [], None
    for message in convo:
        if message["role"] == "assistant":
            result = await env.step(message)
            got += [m["content"] for m in result.messages]
        elif message["role"] == "tool":
            want.append(message["content"])
    await env.close()
    return got, want, result


# ---------------------------------------------------------------------------- the split
@pytest.mark.parametrize("family", FAMILIES)
def test_held_out_templates_are_a_quarter_of_each_kind_and_never_train(family):
    train, held_out = templates(family, "train"), templates(family, "eval")
    train_ids, eval_ids = {i for i, _ in train}, {i for i, _ in held_out}
    assert train_ids.isdisjoint(eval_ids)
    assert {t.text for _, t in train}.isdisjoint({t.text for _, t in held_out})
    assert len(held_out) >= len(train_ids | eval_ids) / 4
    assert {t.kind for _, t in held_out} == {t.kind for _, t in train}  # every kind held out
    env = CalculatorEnv(family=family)
    made = {split: env.tasks(split, 200, seed=5) for split in ("train", "eval")}
    assert {t["template"] for t in made["train"]} == train_ids  # 200 tasks reach them all
    assert {t["template"] for t in made["eval"]} == eval_ids
    demos = env.demonstrations(200, seed=0, demo_fraction=0.5)
    prompts = {convo[1]["content"] for convo in demos}
    assert prompts.isdisjoint({t["prompt"] for t in made["eval"]})
    assert all(t["kind"] and t["family"] == family for ts in made.values() for t in ts)


def test_the_same_seed_makes_the_same_tasks_and_another_seed_others():
    first = generate_family_tasks("dependent", "train", 20, seed=3)
    assert first == generate_family_tasks("dependent", "train", 20, seed=3)
    assert first != generate_family_tasks("dependent", "train", 20, seed=4)


# ---------------------------------------------------------------------------- demonstrations
@pytest.mark.parametrize("family", FAMILIES)
def test_every_demonstration_replays_through_the_env_to_full_reward(family):
    """Correct demonstrations only: no guesses whatever `demo_fraction` says; the tool
    replies written in them are the env's own."""
    env = CalculatorEnv(family=family)
    n = 24 if family == "program" else 60  # a sandbox session an episode: ~0.1 s each
    demos = env.demonstrations(n, seed=1, demo_fraction=0.0)
    tasks = generate_family_tasks(family, "train", n, seed=1 + 7919)
    assert [convo[1]["content"] for convo in demos] == [t["prompt"] for t in tasks]
    for task, convo in zip(tasks, demos, strict=True):
        got, want, result = asyncio.run(_replay(env, task, convo))
        assert got == want and result.done, (task, got, want)
        assert result.rewards == {"correct": 1.0}, (task, result.info)
    calls = [sum(m["role"] == "tool" for m in convo) for convo in demos]
    if family == "dependent":  # chains of 2 and 3 calls
        assert set(calls) == {2, 3}
    elif family == "mixed":  # no-tool tasks answer directly
        assert set(calls) == {0, 1}
    else:
        assert set(calls) == {1}


def test_a_dependent_chain_needs_each_reply_read():
    """An order's reply names the item and count; its price is behind another call: stopping
    after the order and computing from it is wrong."""
    task = next(
        t for t in generate_family_tasks("dependent", "eval", 50, 2) if t["kind"] == "order"
    )
    env = CalculatorEnv(family="dependent")
    customer = task["calls"][0]["arguments"]["customer"]
    assert customer in task["prompt"]
    count, item = task["orders"][customer].split()
    wrong = [
        {"role": "system", "content": ""},
        _call("order", customer=customer),
        _call("calculator", expression=f"{count} * 1"),
        {"role": "assistant", "content": count},
    ]
    got, _, result = asyncio.run(_replay(env, task, wrong))
    assert got == [f"{count} {item}", count] and result.rewards == {"correct": 0.0}
    got, want, result = asyncio.run(_replay(env, task, demonstration(task)))
    assert got == want and result.rewards == {"correct": 1.0}


def test_every_program_template_prints_its_answer_in_the_sandbox_held_out_ones_too():
    """The `program` family's calls, train and held-out phrasings alike, name the numbers in
    the words' order and print the task's answer when the sandbox runs them."""
    tasks = [
        t
        for split in ("train", "eval")
        for t in generate_family_tasks("program", split, 300, seed=2)
    ]
    kinds = ("mul_add", "mul_sub", "add_mul", "share", "sub_sub", "add_add")
    assert {t["template"] for t in tasks} == {f"{k}/{i}" for k in kinds for i in range(8)}
    assert SANDBOX_LIMITS.memory_mb + SANDBOX_LIMITS.workspace_mb <= 160  # 64 episodes fit
    with make_sandbox("program") as session:
        for task in tasks:
            (call,) = task["calls"]
            code = call["arguments"]["code"]
            numbers = [line.split(" = ")[1] for line in code.splitlines()[:-1]]
            assert numbers == re.findall(r"\d+", task["prompt"]), (task["prompt"], code)
            reply = python_without_example(code, sandbox=session)
            assert reply == f"stdout:\n{task['answer']}\nexit code 0", (code, reply)


def test_a_program_is_judged_by_the_answer_it_leads_to_and_its_errors_are_read():
    """A program in a training phrasing's shape on the held-out `mul_add` phrasing ("There are
    C on a shelf. Adds A bags of B each": C + A * B) prints another number: reward 0; a
    program that raises shows its traceback and the episode goes on."""
    task = next(
        t for t in generate_family_tasks("program", "eval", 60, 3) if t["template"] == "mul_add/3"
    )
    c, a, b = map(int, re.findall(r"\d+", task["prompt"]))
    env = CalculatorEnv(family="program")
    copied = [
        _call("python", code=f"x = {c}\ny = {a}\nz = {b}\nprint(x * y + z)"),
        {"role": "assistant", "content": str(c * a + b)},
    ]
    got, _, result = asyncio.run(_replay(env, task, copied))
    assert got == [f"stdout:\n{c * a + b}\nexit code 0"] and c * a + b != int(task["answer"])
    assert result.rewards == {"correct": 0.0} and result.info["used_tool"]
    broken = [
        _call("python", code="print(bags * per_bag)"),
        _call("python", code=f"print({c} + {a} * {b})"),
        {"role": "assistant", "content": task["answer"]},
    ]
    got, _, result = asyncio.run(_replay(env, task, broken))
    assert "NameError: name 'bags' is not defined" in got[0] and "exit code 1" in got[0]
    assert got[1] == f"stdout:\n{task['answer']}\nexit code 0"
    assert result.rewards == {"correct": 1.0}


def test_the_lookup_tools_name_what_they_do_not_know():
    task = generate_family_tasks("dependent", "train", 1, 0)[0]
    env = CalculatorEnv(family="dependent")
    got, _, _ = asyncio.run(
        _replay(env, task, [_call("price", item="unicorns"), _call("order", customer="Zed")])
    )
    assert got[0].startswith("Error: no price for 'unicorns'; priced items: ")
    assert got[1] == "Error: no order for 'Zed'"


def test_a_mixed_task_that_needs_no_tool_pays_half_after_a_call():
    task = next(t for t in generate_family_tasks("mixed", "eval", 40, 0) if t["kind"] == "reply")
    env = CalculatorEnv(family="mixed")
    answer = {"role": "assistant", "content": task["answer"]}
    _, _, direct = asyncio.run(_replay(env, task, [answer]))
    called = [_call("calculator", expression=task["answer"]), answer]
    _, _, after_call = asyncio.run(_replay(env, task, called))
    assert direct.rewards == {"correct": 1.0} and "needless_call" not in direct.info
    assert after_call.rewards == {"correct": NEEDLESS_CALL_REWARD}
    assert after_call.info["needless_call"] and after_call.info["kind"] == "reply"


def test_the_families_calculator_shows_no_example_to_copy():
    """SmolLM2 copied `(3 + 4) * 2 / 5` from the description as its call (issue 59)."""
    plain = tool_spec(calculator_without_example)["function"]
    assert plain["name"] == "calculator"
    assert "(3 + 4)" in json.dumps(tool_spec(calculator))  # the tiny default's, unchanged
    assert not any(ch.isdigit() for ch in json.dumps(plain["parameters"]))
    assert calculator_without_example("(37 + 12) * 5") == "245"
    for family in FAMILIES:
        env = CalculatorEnv(family=family)
        env.task = generate_family_tasks(family, "train", 1, 0)[0]
        want = python_without_example if family == "program" else calculator_without_example
        assert want in env.get_tools()
    code = tool_spec(python_without_example)["function"]  # nor the program-of-thought's python
    assert code["name"] == "python" and "sum(range" in json.dumps(tool_spec(python))
    assert "sum(range" not in json.dumps(code) and "for example" not in json.dumps(code)


def test_a_family_refuses_the_default_tasks_own_knobs():
    with pytest.raises(ValueError, match="family must be one of"):
        CalculatorEnv(family="riddles")
    with pytest.raises(ValueError, match="does not take"):
        CalculatorEnv(family="mixed", tool=False)


# ---------------------------------------------------------------------------- eval by kind
def _traj(reward: float, tools: int = 0, status: Status = Status.OK) -> Trajectory:
    return Trajectory(
        task_id="t",
        group_id="t",
        token_ids=[1] * 4,
        loss_mask=[0, 0, 1, 1],
        turn_spans=[(2, 4)],
        reward=reward,
        status=status,
        tool_call_count=tools,
    )


def test_the_report_gives_each_kind_its_reward_and_tool_call_rate():
    groups = [
        Group("a", [_traj(1.0, 1), _traj(0.0, 1)]),
        Group("b", [_traj(1.0), _traj(1.0, 2)]),
        Group("c", [_traj(0.0), _traj(1.0, 0, Status.ENV_ERROR)]),  # infra: counts as a failure
        Group("d", [_traj(1.0), _traj(1.0)]),  # a task without a kind: in the mean only
    ]
    report = EvalReport.from_groups(groups, k=2, kinds=["fact", "arith", "fact", None])
    assert list(report.per_kind) == ["arith", "fact"]
    fact, arith = report.per_kind["fact"], report.per_kind["arith"]
    assert (fact.tasks, fact.episodes, fact.reward) == (2, 4, pytest.approx(0.25))
    assert fact.tool_call_rate == pytest.approx(2 / 3)  # over the 3 scored episodes
    assert (arith.reward, arith.tool_call_rate) == (1.0, 0.5)
    metrics = report.as_metrics()
    assert metrics["eval/kind/fact/reward"] == pytest.approx(0.25)
    assert metrics["eval/kind/arith/tool_call_rate"] == 0.5
    assert "kind fact" in report.table() and "kind arith" in report.table()
    assert report.kind_lines()[0] == "kind arith: reward 1.000, tool_call_rate 0.500 (1 tasks)"
    assert json.loads(json.dumps(report.to_json()))["per_kind"]["fact"]["episodes"] == 4
    assert EvalReport.from_groups(groups, k=2).per_kind == {}


def test_a_kind_more_than_a_tenth_below_step_0_is_warned_about_by_name():
    step0 = {"eval/kind/fact/reward": 0.8, "eval/kind/arith/reward": 0.5, "eval/reward/mean": 0.6}
    later = {"eval/kind/fact/reward": 0.6, "eval/kind/arith/reward": 0.45, "eval/reward/mean": 0.9}
    assert kind_regressions(step0, later) == [("fact", 0.8, 0.6)]
    (line,) = kind_drop_warnings(step0, later, step=10)
    assert line.startswith("warning: [eval] step 10: kind fact reward 0.600 is 0.200 below")
    assert "0.800" in line
    assert kind_drop_warnings(step0, step0, step=10) == []


class _CallThenAnswer:
    """Calls the calculator on `78 * 52` on the first turn, then answers 4056."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    async def __call__(self, prompt_ids, sampling, session) -> Completion:
        if "<tool_response>" in self.tokenizer.decode(prompt_ids):
            text = "4056"
        else:
            call = {"name": "calculator", "arguments": {"expression": "78 * 52"}}
            text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=1)


def test_evaluate_reports_the_kinds_its_tasks_name(tiny_tokenizer):
    from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner

    engine = RolloutRunner(
        _CallThenAnswer(tiny_tokenizer),
        LocalEnvs(lambda: CalculatorEnv(family="mixed")),
        ChatRenderer(tiny_tokenizer),
        RolloutConfig(max_turns=3),
    )
    arith = {"prompt": "What is 78 * 52?", "answer": "4056", "expression": "78 * 52"}
    tasks = [
        {**arith, "task_id": "a", "kind": "arith", "needs_tool": True},
        {"task_id": "r", "prompt": "Reply with 4056.", "answer": "4056", "kind": "reply",
         "needs_tool": False},
        {"task_id": "f", "prompt": "How many days are in a week?", "answer": "7",
         "kind": "fact", "needs_tool": False},
    ]  # fmt: skip
    report = asyncio.run(evaluate(engine, tasks, k=2))
    rewards = {kind: r.reward for kind, r in report.per_kind.items()}
    assert rewards == {"arith": 1.0, "reply": NEEDLESS_CALL_REWARD, "fact": 0.0}
    assert all(r.tool_call_rate == 1.0 and r.episodes == 2 for r in report.per_kind.values())


class _Programmer:
    """Writes the program of the task its prompt names (`tasks`, by prompt), then answers
    the number the tool's reply printed."""

    def __init__(self, tokenizer, tasks) -> None:
        self.tokenizer, self.code = tokenizer, {t["prompt"]: t["calls"][0] for t in tasks}

    async def __call__(self, prompt_ids, sampling, session) -> Completion:
        text = self.tokenizer.decode(prompt_ids)
        printed = re.findall(r"stdout:\n(\d+)\nexit code 0", text)
        if printed:
            out = printed[-1]
        else:
            (call,) = [c for p, c in self.code.items() if p in text]
            out = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        ids = self.tokenizer.encode(out + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=1)


def test_plumbing_the_program_config_plays_its_held_out_tasks_through_the_sandbox(tiny_tokenizer):
    """`apps/agent/smollm2_program.yaml`'s env (by id and kwargs), its rollout budgets and the
    evaluator: a policy that writes each held-out task's program through the env's sandboxed
    `python` and answers what it printed scores 1.0 on every kind, within the config's turns
    and tokens (the tiny tokenizer's count; the learning run is docs/real_model.md's)."""
    from forge_agent.env.registry import make_env
    from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutRunner
    from forge_agent.run.config import load_config

    cfg = load_config("apps/agent/smollm2_program.yaml")
    assert (cfg.env.id, cfg.env.kwargs, cfg.model.name) == (
        "calculator",
        {"family": "program"},
        "smollm2-135m",
    )
    tasks = make_env(cfg.env.id, **cfg.env.kwargs).tasks("eval", 12, seed=0)
    runner = RolloutRunner(
        _Programmer(tiny_tokenizer, tasks),
        LocalEnvs(lambda: make_env(cfg.env.id, **cfg.env.kwargs)),
        ChatRenderer(tiny_tokenizer),
        cfg.rollout,
    )
    report = asyncio.run(evaluate(runner, tasks, k=1))
    assert report.per_kind and {t["kind"] for t in tasks} == set(report.per_kind)
    assert all(r.reward == 1.0 and r.tool_call_rate == 1.0 for r in report.per_kind.values())

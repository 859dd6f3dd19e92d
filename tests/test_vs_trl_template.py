"""The TRL side of `apps.bench.vs_trl` sees exactly forge-agent's tokens: its chat template,
through transformers' `apply_chat_template` on the project's tokenizer with the calculator as a
callable tool (as TRL's `GRPOTrainer(tools=...)` renders), gives the renderer's prompt ids, and
the tool-result tokens TRL appends after a tool call are the renderer's bridge. TRL itself is
not needed (the bench installs it in its own venv)."""

from __future__ import annotations

import copy
import json

import pytest

from apps.bench.vs_trl import judge_reward, tool_suffix_ids, trl_chat_template, trl_tool
from envs.calculator.env import SYSTEM_PROMPT, CalculatorEnv
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.toolkit.schema import tool_spec
from tools.calculator import calculator, logging_calculator


@pytest.fixture(scope="module")
def sides(tiny_tokenizer):
    """(forge-agent's renderer, the tokenizer as the TRL side configures it)."""
    trl_tok = copy.deepcopy(tiny_tokenizer)
    trl_tok.chat_template = trl_chat_template(tiny_tokenizer.chat_template)
    return ChatRenderer(tiny_tokenizer), trl_tok


def _prompt(task):
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["prompt"]},
    ]


def test_trl_prompt_tokens_equal_the_renderers(sides):
    renderer, trl_tok = sides
    tool = trl_tool(calculator)
    for task in load_tasks(ResolvedEnv.of("calculator", kwargs={"difficulty": 1}), "train", 4, 0):
        ours = renderer.render_prompt(_prompt(task), [tool_spec(calculator)])
        theirs = trl_tok.apply_chat_template(
            _prompt(task), tools=[tool], add_generation_prompt=True, return_dict=False
        )
        assert list(theirs) == ours, trl_tok.decode(theirs)


def test_trl_tool_result_tokens_equal_the_renderers_bridge(sides):
    renderer, trl_tok = sides
    task = load_tasks(ResolvedEnv.of("calculator", kwargs={"difficulty": 1}), "train", 1, 0)[0]
    prompt = renderer.render_prompt(_prompt(task), [tool_spec(calculator)])
    arguments = json.dumps({"expression": task["expression"]})
    body = f'{{"name": "calculator", "arguments": {arguments}}}'
    call = f"<tool_call>\n{body}\n</tool_call><|im_end|>"
    completion = trl_tok.encode(call, add_special_tokens=False)
    result = trl_tool(calculator)(task["expression"])
    assert result == task["answer"]
    bridged = renderer.bridge(
        prompt,
        completion,
        [{"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": result}],
        [tool_spec(calculator)],
    )
    suffix = tool_suffix_ids(trl_tok, [{"role": "tool", "name": "calculator", "content": result}])
    assert bridged == prompt + completion + suffix, trl_tok.decode(suffix)


def test_judge_reward_scores_only_a_final_answer():
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}
    answer = {"role": "assistant", "content": "7"}
    assert judge_reward([call, {"role": "tool", "content": "7"}, answer], "7") == 1.0
    assert judge_reward([{"role": "assistant", "content": "\\boxed{8}"}], "7") == 0.0
    assert judge_reward([call], "7") == 0.0


def test_long_tool_replies_are_cut_alike_on_both_sides(sides):
    """A long tool reply (the calculator with an evaluation log, as in scenario b) is cut to
    `rollout.tool_output_tokens` by the TRL side exactly as the rollout engine cuts it, and
    the cut reply bridges to the same tokens."""
    renderer, trl_tok = sides
    env = CalculatorEnv(difficulty=1, tool_log_chars=2000)
    task = load_tasks(ResolvedEnv.of("calculator", kwargs={"difficulty": 1}), "train", 1, 0)[0]
    full = env.tool(task["expression"])
    assert full.rsplit("\n", 1)[-1] == task["answer"]
    assert len(trl_tok.encode(full, add_special_tokens=False)) > 256
    cut = trl_tool(env.tool, 256, trl_tok)(task["expression"])
    assert cut == renderer.truncate_text(full, 256) and "[truncated" in cut
    prompt = renderer.render_prompt(_prompt(task), [tool_spec(env.tool)])
    assert prompt == renderer.render_prompt(_prompt(task), [tool_spec(calculator)])
    body = f'{{"name": "calculator", "arguments": {json.dumps({"expression": "1"})}}}'
    completion = trl_tok.encode(
        f"<tool_call>\n{body}\n</tool_call><|im_end|>", add_special_tokens=False
    )
    message = {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": cut}
    bridged = renderer.bridge(prompt, completion, [message], [tool_spec(env.tool)])
    suffix = tool_suffix_ids(trl_tok, [{"role": "tool", "name": "calculator", "content": cut}])
    assert bridged == prompt + completion + suffix


def test_the_calculators_log_needs_a_positive_size_and_the_env_refuses_a_bad_one():
    with pytest.raises(ValueError, match="log_chars"):
        logging_calculator(0)
    with pytest.raises(ValueError, match="tool_log_chars"):
        CalculatorEnv(tool_log_chars=-1)


def test_the_trl_arm_cannot_import_the_main_environment_s_vllm():
    """TRL imports vLLM whenever `find_spec("vllm")` finds it; the arm hides it (the arm never
    generates with vLLM, and it carried +0.30 GB of peak memory for it)."""
    import subprocess
    import sys

    probe = (
        "import importlib.util, sys\n"
        "from apps.bench.vs_trl import hide_vllm\n"
        "hide_vllm()\n"
        "assert importlib.util.find_spec('vllm') is None\n"
        "try:\n    import vllm\nexcept ImportError:\n    print('hidden')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "hidden", out.stderr[-2000:]


@pytest.fixture(scope="module")
def chatml_sides(tmp_path_factory):
    """(forge-agent's ChatML renderer, the tokenizer as the TRL side configures it for a ChatML
    model without tool tokens: scenario s, SmolLM2), on a tiny GGUF model's tokenizer."""
    from transformers import AutoTokenizer

    from apps.bench.trl_grpo import chatml_tools_template
    from tests.gguf_files import write_tiny_gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    trl_tok = copy.deepcopy(tokenizer)
    trl_tok.chat_template = chatml_tools_template()
    renderer = ChatRenderer(tokenizer)
    assert renderer.kind == "chatml"
    return renderer, trl_tok


def test_trl_chatml_prompt_and_tool_result_tokens_equal_the_renderers(chatml_sides):
    renderer, trl_tok = chatml_sides
    tools = [tool_spec(calculator)]
    for task in load_tasks(ResolvedEnv.of("calculator", kwargs={"difficulty": 2}), "train", 3, 0):
        ours = renderer.render_prompt(_prompt(task), tools)
        theirs = trl_tok.apply_chat_template(
            _prompt(task),
            tools=[trl_tool(calculator)],
            add_generation_prompt=True,
            return_dict=False,
        )
        assert list(theirs) == ours, trl_tok.decode(theirs)
    body = json.dumps({"name": "calculator", "arguments": {"expression": task["expression"]}})
    completion = trl_tok.encode(
        f"<tool_call>{body}</tool_call><|im_end|>", add_special_tokens=False
    )
    result = trl_tool(calculator)(task["expression"])
    message = {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": result}
    bridged = renderer.bridge(ours, completion, [message], tools)
    suffix = tool_suffix_ids(trl_tok, [{"role": "tool", "name": "calculator", "content": result}])
    assert bridged == ours + completion + suffix, trl_tok.decode(suffix)

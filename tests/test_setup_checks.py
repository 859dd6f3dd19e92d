"""`forge_agent.run.setup_checks`: the prompt-length warning a run prints at setup."""

from __future__ import annotations

from forge_agent.env.tasks import load_tasks
from forge_agent.run.setup_checks import check_prompt_lengths, prompt_length_warning


def test_the_warning_names_the_share_the_longest_prompt_and_the_key_to_raise():
    warning = prompt_length_warning([100, 600, 900, 200], 512, "code_exec tasks")
    assert warning is not None
    assert "2 of 4 code_exec tasks (50%)" in warning and "longest 900" in warning
    assert "rollout.max_total_tokens" in warning and "at least 964" in warning
    assert prompt_length_warning([100, 511], 512) is None


class CharRenderer:
    """Counts characters as tokens: enough to check what is rendered and compared."""

    def render_prompt(self, messages, tools):
        return list("".join(m["content"] for m in messages) + str(tools or ""))


def test_prompts_are_rendered_with_the_envs_system_prompt_and_tools():
    tasks = load_tasks("calculator", "eval", 8, seed=0)
    lengths = [len(CharRenderer().render_prompt([{"content": t["prompt"]}], [])) for t in tasks]
    assert (
        check_prompt_lengths("calculator", {}, tasks, CharRenderer(), max(lengths) + 1) is not None
    )
    assert check_prompt_lengths("calculator", {}, tasks, CharRenderer(), 100_000) is None

"""`forge_agent.run.setup_checks`: the prompt-length warning a run prints at setup."""

from __future__ import annotations

from forge_agent.env.resolved import ResolvedEnv
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
    tasks = load_tasks(ResolvedEnv.of("calculator"), "eval", 8, seed=0)
    lengths = [len(CharRenderer().render_prompt([{"content": t["prompt"]}], [])) for t in tasks]
    assert (
        check_prompt_lengths(ResolvedEnv.of("calculator"), tasks, CharRenderer(), max(lengths) + 1)
        is not None
    )
    assert (
        check_prompt_lengths(ResolvedEnv.of("calculator"), tasks, CharRenderer(), 100_000) is None
    )


def test_a_run_warns_at_setup_when_prompts_exceed_the_episode_budget(tmp_path):
    """Before anything starts, a run whose tasks' prompts alone exceed
    `rollout.max_total_tokens` says so (share, longest, key) on stderr, then runs (here the
    run itself is replaced by a stub, in a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import apps.agent.main as app, forge_agent.run.controller as controller\n"
        "async def train(cfg):\n"
        "    print('run started')\n"
        "    return {'evals': [], 'profile': None, 'counts': {}, 'steps': 0, 'wall_s': 0.0}\n"
        "controller.train = train\n"
        f"raise SystemExit(app.main(['output_dir={tmp_path}', 'metrics.console=false',\n"
        "    'rollout.max_total_tokens=24', 'rollout.max_new_tokens_per_turn=8']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "warning:" in out.stderr and "rollout.max_total_tokens=24" in out.stderr
    assert "run started" in (tmp_path / "run.log").read_text() + out.stdout

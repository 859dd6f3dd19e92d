"""Every code block of docs/envs.md runs: the env file is copied verbatim into a temporary
package, the Python blocks run in order in one process against it, the `pyproject.toml`
entry-point block is installed as package metadata, and every command parses as a run config
(the training commands run in tests/test_unknown_envs_train.py, the HumanEval one loads its
tasks here)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from forge_agent.env.resolved import ResolvedEnv
from tests.user_envs import (
    docs_blocks,
    docs_commands,
    docs_reverse_package,
    make_user_package,
    remove_user_package,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reverse_package(tmp_path_factory):
    root = docs_reverse_package(tmp_path_factory.mktemp("docs_pkg"))
    yield root
    remove_user_package(root)


def test_the_python_blocks_run_in_order(reverse_package, tmp_path):
    blocks = [text for lang, text in docs_blocks() if lang == "python"][1:]
    assert len(blocks) == 5
    # One process, one namespace, as a reader pasting the blocks into a session would; the
    # server takes a free port instead of the page's 8000.
    script = "\n\n".join(b.replace("port=8000", "port=0") for b in blocks)
    path = os.pathsep.join(
        p for p in (str(reverse_package), str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Reverse the word" in out  # the data block's prompt template
    assert "rewards={'letters': 1.0}" in out and "{'letters': 1.0}" in out  # local run, pool
    assert "1.0 {'letters': 1.0}" in out  # OpenEnv client
    assert "['reverse']" in out  # the agent env seen through the server
    assert out.rstrip().endswith("1.0 True")  # Gymnasium
    lengths = [line for line in out.splitlines() if line[:1].isdigit() and "Reverse" in line]
    n_train, n_eval = map(int, lengths[0].split()[:2])
    assert n_train + n_eval == 8 and n_train and n_eval


def test_the_docs_env_gives_warm_start_demonstrations(reverse_package, tiny_tokenizer):
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.warm_start import demo_trajectory, demonstrations

    convos, tools = demonstrations(ResolvedEnv.of("my_envs.reverse:ReverseEnv"), 8, 1.0, seed=0)
    renderer = ChatRenderer(tiny_tokenizer)
    for convo in convos:
        traj = demo_trajectory(renderer, convo, tools)
        assert sum(traj.loss_mask) > 0
    assert [t["function"]["name"] for t in tools] == ["reverse"]


def test_the_pyproject_entry_point_block_makes_an_env_id(reverse_package, tmp_path):
    from forge_agent.env import registered_env_ids
    from forge_agent.env.tasks import load_tasks

    (toml,) = [text for lang, text in docs_blocks() if lang == "toml"]
    declared = tomllib.loads(toml)["project"]["entry-points"]["forge_agent.envs"]
    root = make_user_package(tmp_path / "meta", {}, entry_points=declared, dist="my-envs")
    try:
        assert "reverse" in registered_env_ids()
        assert len(load_tasks(ResolvedEnv.of("reverse"), "eval", 5, seed=0)) == 5
    finally:
        remove_user_package(root)


def test_every_command_is_a_valid_run_config():
    from forge_agent.run.config import parse_cli

    commands = docs_commands()
    assert len(commands) == 11
    for args in commands:
        parse_cli(args)  # raises ConfigError on a bad key or value


HUMANEVAL_ROWS = [
    {
        "task_id": f"HumanEval/{i}",
        "prompt": f'def add{i}(a: int) -> int:\n    """Add {i} to a."""\n',
        "canonical_solution": f"    return a + {i}\n",
        "test": f"\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n"
        f"    assert candidate(2) == {2 + i}\n",
        "entry_point": f"add{i}",
    }
    for i in range(10)
]


def test_the_humaneval_command_loads_code_exec_tasks(tmp_path):
    """The page's HumanEval command, on a file in HumanEval's exact shape (gzipped jsonl)."""
    from forge_agent.env.tasks import load_tasks
    from forge_agent.run.config import parse_cli

    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(row) + "\n" for row in HUMANEVAL_ROWS)
    (args,) = [a for a in docs_commands() if any("HumanEval" in x for x in a)]
    cfg = parse_cli([a.replace("/path/to/HumanEval.jsonl.gz", str(path)) for a in args])
    env = cfg.env
    tasks = [
        task
        for split in ("train", "eval")
        for task in load_tasks(
            ResolvedEnv.of(env),
            split,
            10,
            0,
        )
    ]
    by_id = {t["task_id"]: t for t in tasks}
    assert sorted(by_id) == sorted(row["task_id"] for row in HUMANEVAL_ROWS)
    row = HUMANEVAL_ROWS[3]
    task = by_id[row["task_id"]]
    assert task["reference"] == row["prompt"] + row["canonical_solution"]
    assert task["test_code"] == row["test"] and task["entry_point"] == "add3"

"""`forge_agent` imports nothing from the project's `envs/`: every module imports, and the code
paths that used to reach into `envs/` (task loading, warm-start demonstrations, the tokenizer
corpus) work for a user's env, in a process where any import of `envs` fails and is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import importlib, importlib.abc, json, pkgutil, sys, traceback

attempts = []


class NoEnvs(importlib.abc.MetaPathFinder):
    """Any import of `envs` (top level or function-local) is recorded and fails."""

    def find_spec(self, name, path=None, target=None):
        if name == "envs" or name.startswith("envs."):
            attempts.append("".join(traceback.format_stack(limit=8)))
            raise ImportError(f"{name} is unreachable in this test")
        return None


sys.meta_path.insert(0, NoEnvs())
sys.path.insert(0, sys.argv[1])  # the user's env package

import forge_agent

failed = {}
modules = [m.name for m in pkgutil.walk_packages(forge_agent.__path__, "forge_agent.")]
for name in modules:
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        failed[name] = repr(exc)

from forge_agent.env import register, registered_env_ids
from forge_agent.models.tiny import env_corpus
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import TaskStream, load_tasks
from forge_agent.warm_start import demonstrations

register("user_reverse", "user_reverse_env:ReverseEnv")
env = ResolvedEnv.of("user_reverse")
exercised = {
    "ids": registered_env_ids(),
    "eval": len(load_tasks(env, "eval", 5, seed=1)),
    "train": next(TaskStream(env))[0]["prompt"],
    "demos": len(demonstrations(env, 3, 1.0, seed=0)[0]),
    "corpus": len(env_corpus(["user_reverse"])),
}
print(json.dumps({"modules": modules, "failed": failed, "attempts": attempts,
                  "exercised": exercised}))
'''

USER_ENV = '''
from forge_agent.env import ToolEnv, holdout


def reverse(text: str) -> str:
    """Reverse a string.

    Args:
        text: The string to reverse.
    """
    return text[::-1]


class ReverseEnv(ToolEnv):
    tools = (reverse,)

    def tasks(self, split, n, seed):
        words = [f"w{seed}x{i}" for i in range(n)]
        made = [{"prompt": f"Reverse {w}.", "answer": w[::-1]} for w in words]
        return holdout(made, split, key=lambda t: t["prompt"])

    def demonstrations(self, n, seed, demo_fraction):
        return [[{"role": "user", "content": "Reverse ab."},
                 {"role": "assistant", "content": "ba"}]] * n

    def judge(self, answer):
        return {"correct": float(answer.strip() == self.task["answer"])}
'''


def test_forge_agent_imports_and_runs_with_envs_unreachable(tmp_path):
    (tmp_path / "user_reverse_env.py").write_text(USER_ENV)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=tmp_path,  # not the repo root: `envs/` is reachable only through PYTHONPATH
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["attempts"] == [], "\n".join(report["attempts"])
    assert len(report["modules"]) > 40
    assert report["failed"] == {}
    exercised = report["exercised"]
    assert "user_reverse" in exercised["ids"] and "calculator" in exercised["ids"]
    assert exercised["eval"] == 5 and exercised["train"].startswith("Reverse w0x")
    assert exercised["demos"] == 3 and exercised["corpus"] > 5

"""The driver's warm start runs in a child process (`controller.start_policy_in_child`): the
supervised pass, its model and optimizer never enter the controller, which reads back the
policy folder's path only; an error in the child is raised in the controller, its type kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A short warm start of its own (keyed apart from the default's, cached after its first run).
SHORT = ["warm_start.steps=2", "warm_start.num_demos=16", "warm_start.batch_size=4"]

PROBE = """
import json, multiprocessing, sys
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.run.config import load_config
from forge_agent.run.controller import start_policy_in_child

cfg = load_config(None, sys.argv[1:])
path = start_policy_in_child(cfg, ResolvedEnv.of(cfg.env))
# the trainer (its model and optimizer code) and transformers; the warm start's own module may
# be imported (the driver names `policy_model` at its top): it loads neither of them
held = [m for m in ("forge_agent.trainer.core", "transformers") if m in sys.modules]
print(json.dumps({"path": str(path), "held": held,
                  "children": len(multiprocessing.active_children())}))
"""


def test_the_warm_start_runs_in_a_child_and_leaves_nothing_here(tiny_model_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *SHORT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(got["path"]).name.startswith("warm-tiny-qwen3-")
    assert (Path(got["path"]) / "config.json").exists()
    assert got["held"] == [], got  # not the trainer nor transformers
    assert got["children"] == 0  # the child is gone


def test_an_error_in_the_child_is_raised_here_as_itself(tmp_path):
    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import start_policy, start_policy_in_child

    cfg = load_config(None, [f"model.name={tmp_path / 'no-such-model'}", *SHORT])
    with pytest.raises(Exception) as here:
        start_policy(cfg, ResolvedEnv.of(cfg.env))
    with pytest.raises(type(here.value)) as there:
        start_policy_in_child(cfg, ResolvedEnv.of(cfg.env))
    assert str(there.value) == str(here.value)
    assert any("warm start's process" in note for note in there.value.__notes__)

"""`--help` of the programs: the training app lists its options, every config section and key
with its default (generated from the schema); `apps.traces` shows its whole description."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from forge_agent.run.config import AgentConfig, TrainingConfig
from forge_agent.typed_config import describe_keys

ROOT = Path(__file__).resolve().parents[1]


def _help(module: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_agent_help_lists_options_sections_and_keys_with_defaults():
    text = _help("apps.agent.main")
    for option in ("--config FILE", "--check", "--verbose", "key=value"):
        assert option in text
    keys = "\n".join(describe_keys(AgentConfig()))
    assert keys in text
    for section in (f.name for f in dataclasses.fields(AgentConfig)):
        if dataclasses.is_dataclass(getattr(AgentConfig(), section)):
            assert f"  {section}:" in text, section
    for key in ("steps=40", "group_size=8", "id=calculator", "max_total_tokens=512", "name=dapo"):
        assert key in text, key


def test_the_key_listing_follows_the_schema():
    cfg = AgentConfig(training=TrainingConfig(steps=7, group_size=3))
    (line,) = [ln for ln in describe_keys(cfg) if ln.strip().startswith("training:")]
    assert "steps=7" in line and "group_size=3" in line


def test_traces_help_shows_its_whole_description():
    text = " ".join(_help("apps.traces").split())
    assert "Render a trace JSONL file" in text and "as one HTML page." in text

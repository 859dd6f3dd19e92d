"""A module imported by the path it had before it moved fails naming its new home, and every
new home named exists (c257d3d: `forge_agent.env.gym_adapter` was a bare ModuleNotFoundError)."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from apps.agent.main import main
from forge_agent.moved import MOVED, MovedModuleError


def test_an_old_module_path_names_its_new_home():
    with pytest.raises(MovedModuleError, match=r"gym_adapter has moved to .*adapters.gymnasium"):
        importlib.import_module("forge_agent.env.gym_adapter")


def test_an_env_id_with_an_old_module_path_is_one_line_naming_the_new_home(capsys):
    assert main(["env.id=forge_agent.env.gym_adapter:GymnasiumEnv", "--check"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "has moved to forge_agent.env.adapters.gymnasium" in line


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_path_is_gone_and_its_new_home_imports(old):
    assert importlib.util.find_spec(MOVED[old]) is not None
    with pytest.raises(MovedModuleError):
        importlib.import_module(old)

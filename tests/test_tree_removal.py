"""Removing a folder the sandbox could write never follows a link it planted (issue 24 #1).

The attacker is a real process (as in a sandbox, or a process a session spawned) that keeps
swapping a folder inside the tree for a symlink to a host folder while the host removes the
tree; the host folder, its files and its mode must come through untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from forge_agent.sandbox.tree_removal import MAX_OPEN_DEPTH, empty_folder, remove_tree
from tests.helpers import host_victim, host_victim_intact

pytestmark = pytest.mark.timeout(60)

SWAPPER = r"""
import os, sys
tree, victim, stop = sys.argv[1:4]
while not os.path.exists(stop):
    for k in range(3):
        sub, real = f"{tree}/d/sub{k}", f"{tree}/d/real{k}"
        try:
            os.makedirs(sub, exist_ok=True)
            for i in range(3):
                open(f"{sub}/f{i}", "w").close()
            os.rename(sub, real)
            os.symlink(victim, sub)
            os.unlink(sub)
            os.rename(real, sub)
        except OSError:
            pass
"""

RACE_S = 3.0
"""How long each race runs; the name-based removal lost it within 0.06-0.73 s (5 runs)."""


def _race(tmp_path: Path, tree: Path, remove: object) -> tuple[Path, int]:
    """Run `remove()` over and over while a swapper process plants links in `tree`."""
    victim = host_victim(tmp_path)
    stop = tmp_path / "stop"
    tree.mkdir(exist_ok=True)
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(tree), str(victim), str(stop)])
    removals = 0
    try:
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline and host_victim_intact(victim):
            remove()  # type: ignore[operator]
            removals += 1
    finally:
        stop.touch()
        swapper.wait(timeout=10)
    return victim, removals


def test_removing_a_tree_never_follows_a_link_swapped_in_meanwhile(tmp_path) -> None:
    tree = tmp_path / "ws"
    victim, removals = _race(tmp_path, tree, lambda: remove_tree(str(tree)))
    assert host_victim_intact(victim), (
        sorted(p.name for p in victim.iterdir()),
        oct(victim.stat().st_mode),
    )
    assert removals > 100  # the race really ran


def test_emptying_a_reply_folder_never_follows_a_link_swapped_in_meanwhile(tmp_path) -> None:
    folder = tmp_path / "replies"
    folder.mkdir()

    def empty() -> None:
        empty_folder(str(folder))
        assert folder.is_dir()

    victim, removals = _race(tmp_path, folder, empty)
    assert host_victim_intact(victim), (
        sorted(p.name for p in victim.iterdir()),
        oct(victim.stat().st_mode),
    )
    assert removals > 100


def test_a_top_level_link_is_unlinked_not_followed(tmp_path) -> None:
    victim = host_victim(tmp_path)
    link = tmp_path / "ws"
    link.symlink_to(victim)
    remove_tree(str(link))
    assert not os.path.lexists(link) and host_victim_intact(victim)


def test_a_tree_deeper_than_the_open_descriptors_is_removed(tmp_path) -> None:
    tree = tmp_path / "ws"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(MAX_OPEN_DEPTH * 40):  # deeper than PATH_MAX allows a name to reach
        os.close(os.open(f"f{level}", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    remove_tree(str(tree))
    assert not tree.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the removal as another user")
def test_folders_the_code_closed_are_opened_through_descriptors_and_removed() -> None:
    """As the sandbox's uid (no CAP_DAC_OVERRIDE): folders of mode 0 and 0500 are removed."""
    root = tempfile.mkdtemp()
    os.chmod(root, 0o777)
    repo = str(Path(__file__).resolve().parents[1])
    script = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from forge_agent.sandbox.tree_removal import remove_tree\n"
        "tree = sys.argv[1] + '/ws'\n"
        "path, made = tree, []\n"
        "for level in range(200):\n"
        "    os.mkdir(path)\n"
        "    open(path + '/f', 'w').close()\n"
        "    made.append(path)\n"
        "    path += '/d'\n"
        "for level, path in reversed(list(enumerate(made))):\n"
        "    os.chmod(path, 0o000 if level % 2 else 0o500)\n"
        "remove_tree(tree)\n"
        "print('gone' if not os.path.lexists(tree) else 'left')\n"
    )
    try:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", script, root, repo],
            capture_output=True,
            text=True,
            timeout=30,
            user=65534,
            group=65534,
            extra_groups=[],
        )
        assert done.stdout.strip() == "gone", done.stderr[-2000:]
    finally:
        remove_tree(root)

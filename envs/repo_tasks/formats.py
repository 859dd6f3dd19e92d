"""Repository tasks from Harbor task folders and SWE-bench-style instances, as task dicts.

A task dict (what `RepoTaskEnv` plays; plain data, so it crosses processes):

    task_id        "harbor/textkit-slugify-dashes"
    prompt         the instruction
    files          {path: text}: the repository snapshot the episode starts from
    hidden_tests   {path: text}: test files the episode never sees (paths relative to tests/)
    fail_to_pass   test ids that must pass after the fix (and fail before it)
    pass_to_pass   test ids that must keep passing
    oracle_patch   a unified diff (`patch -p1`) that solves the task, or ""
    image          the Docker image the environment builds from (Harbor's FROM), or ""
    build          {"context": environment folder, "runs": RUN lines} when it has RUN steps
    limits         {"wall_s": ..., "memory_mb": ...} of the hidden-test run

**Harbor folder** (`task.toml`, `instruction.md`, `environment/`, `tests/`, `solution/`):
`environment/Dockerfile` is mapped to the sandbox: `COPY <dir> /workspace` (or `.`) names the
files of the workspace; `FROM` names the image. With the Docker backend the image must be on
its engine (nothing is pulled), and a Dockerfile with `RUN` steps is built there (offline);
bubblewrap runs on the host's files, so a task with a `RUN` step is refused there, naming it.
`tests/` are the hidden tests (`test.sh` is Harbor's own entry point and is not run: the tests
named in `task.toml`'s
`[metadata] fail_to_pass` / `pass_to_pass`, or every `test*` of `tests/*.py`, are).
`solution/*.patch` is the oracle patch (`solve.sh` applies it in Harbor).

**SWE-bench instance** (`instance_id`, `repo`, `base_commit`, `problem_statement`, `patch`,
`test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`): `repo` must be a local git repository (nothing
is cloned); the snapshot is `git archive base_commit`; the files `test_patch` touches, as it
leaves them, are the hidden tests (and are taken out of the snapshot); `patch` is the oracle.

Bad input raises `TaskFormatError` naming the task and what is wrong.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "TaskFormatError",
    "apply_patch",
    "load_harbor_task",
    "load_harbor_tasks",
    "load_swebench_instance",
]

SKIP_DIRS = {"__pycache__", ".git"}


class TaskFormatError(ValueError):
    """A task folder or instance that cannot become a repository task (names the task)."""

    def __init__(self, task: str, problem: str) -> None:
        super().__init__(f"repository task {task!r}: {problem}")
        self.task, self.problem = task, problem


def _read_tree(root: Path) -> dict[str, str]:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not SKIP_DIRS & set(rel.parts) and path.suffix != ".pyc":
            files[rel.as_posix()] = path.read_text()
    return files


def _dockerfile(task: str, env_dir: Path) -> tuple[str, str, list[str]]:
    """(FROM image, folder of the workspace files relative to environment/, RUN lines) of
    the environment's Dockerfile."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise TaskFormatError(task, f"{env_dir}/Dockerfile is missing")
    image, source, runs = "", None, []
    for number, raw in enumerate(dockerfile.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            image = rest.split()[0]
        elif word in ("COPY", "ADD"):
            args = [a for a in rest.split() if not a.startswith("--")]
            if len(args) != 2 or args[1].rstrip("/") not in ("/workspace", ".", "/app"):
                raise TaskFormatError(
                    task,
                    f"Dockerfile line {number} ({line!r}): only a copy of one folder into "
                    "the workspace (/workspace) can be mapped to the sandbox",
                )
            source = args[0]
        elif word == "RUN":
            runs.append(f"line {number} ({line!r})")
        elif word not in ("WORKDIR", "ENV", "LABEL", "USER", "CMD", "ENTRYPOINT"):
            raise TaskFormatError(task, f"Dockerfile line {number}: {word} is not supported")
    if not image:
        raise TaskFormatError(task, "the Dockerfile has no FROM line")
    if source is None:
        raise TaskFormatError(task, "the Dockerfile copies no folder into /workspace")
    return image, source, runs


def load_harbor_task(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The task dict of one Harbor task folder (see the module docstring)."""
    root = Path(folder)
    task = f"harbor/{root.name}"
    for needed in ("task.toml", "instruction.md", "environment", "tests"):
        if not (root / needed).exists():
            raise TaskFormatError(task, f"{root / needed} is missing (not a Harbor task folder)")
    config = tomllib.loads((root / "task.toml").read_text())
    metadata = config.get("metadata", {})
    image, source, runs = _dockerfile(task, root / "environment")
    repo = (root / "environment" / source).resolve()
    if not repo.is_dir() or not repo.is_relative_to((root / "environment").resolve()):
        raise TaskFormatError(
            task, f"the Dockerfile copies {source!r}, not a folder of environment/"
        )
    hidden = {k: v for k, v in _read_tree(root / "tests").items() if k.endswith(".py")}
    if not hidden:
        raise TaskFormatError(task, "tests/ holds no Python test file")
    patches = sorted((root / "solution").glob("*.patch")) if (root / "solution").is_dir() else []
    environment = config.get("environment", {})
    limits = {
        "wall_s": float(config.get("verifier", {}).get("timeout_sec", 60.0)),
        "memory_mb": int(environment.get("memory_mb", 512)),
    }
    return {
        "task_id": task,
        "prompt": (root / "instruction.md").read_text().strip(),
        "files": _read_tree(repo),
        "hidden_tests": hidden,
        "fail_to_pass": list(metadata.get("fail_to_pass", [])),
        "pass_to_pass": list(metadata.get("pass_to_pass", [])),
        "oracle_patch": patches[0].read_text() if patches else "",
        "image": image,
        "build": {"context": str((root / "environment").resolve()), "runs": runs} if runs else {},
        "limits": limits,
    }


def load_harbor_tasks(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every Harbor task folder directly under `root` (a folder with a task.toml), by name."""
    folders = sorted(p.parent for p in Path(root).glob("*/task.toml"))
    if not folders:
        raise TaskFormatError(str(root), "no Harbor task folder (<name>/task.toml) in it")
    return [load_harbor_task(folder) for folder in folders]


def _ids(value: Any) -> list[str]:
    return list(json.loads(value) if isinstance(value, str) else value or [])


def load_swebench_instance(instance: Mapping[str, Any]) -> dict[str, Any]:
    """The task dict of a SWE-bench-style instance whose `repo` is a local git repository."""
    name = str(instance.get("instance_id", "?"))
    task = f"swebench/{name}"
    missing = [
        key
        for key in ("repo", "base_commit", "problem_statement", "test_patch", "FAIL_TO_PASS")
        if key not in instance
    ]
    if missing:
        raise TaskFormatError(task, f"the instance lacks {', '.join(missing)}")
    repo = Path(str(instance["repo"]))
    if not (repo / ".git").exists():
        raise TaskFormatError(
            task, f"repo {str(repo)!r} is not a local git repository (nothing is cloned here)"
        )
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", str(instance["base_commit"])],
        capture_output=True,
    )
    if archive.returncode != 0:
        raise TaskFormatError(
            task, f"git archive of {instance['base_commit']!r}: {archive.stderr.decode()[-300:]}"
        )
    files = {}
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read().decode("utf-8", "replace")
    try:
        tested = apply_patch(files, str(instance["test_patch"]))
    except ValueError as exc:
        raise TaskFormatError(task, f"test_patch does not apply: {exc}") from exc
    touched = _patched_paths(str(instance["test_patch"]))
    hidden = {path: tested[path] for path in touched if path in tested}
    return {
        "task_id": task,
        "prompt": str(instance["problem_statement"]).strip(),
        "files": {k: v for k, v in files.items() if k not in touched},
        "hidden_tests": hidden,
        "fail_to_pass": _ids(instance["FAIL_TO_PASS"]),
        "pass_to_pass": _ids(instance.get("PASS_TO_PASS")),
        "oracle_patch": str(instance.get("patch") or ""),
        "image": "",
        "build": {},
        "limits": {"wall_s": 60.0, "memory_mb": 512},
    }


def _patched_paths(diff: str) -> list[str]:
    paths = []
    for line in diff.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            paths.append(line[4:].split("\t")[0].removeprefix("b/"))
    return paths


def apply_patch(files: Mapping[str, str], diff: str) -> dict[str, str]:
    """`files` with the unified diff `diff` applied (`patch -p1`, run on the host in a
    temporary folder: the patches are task data, not model output). Raises ValueError."""
    with tempfile.TemporaryDirectory(prefix="repo-task-") as tmp:
        root = Path(tmp)
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        try:
            done = subprocess.run(
                ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--silent"],
                input=diff,
                cwd=root,
                capture_output=True,
                text=True,
            )
        except FileNotFoundError:
            raise ValueError(
                "the `patch` program is not installed (apt-get install patch)"
            ) from None
        if done.returncode != 0:
            raise ValueError((done.stdout + done.stderr).strip()[-500:] or "patch failed")
        return _read_tree(root)

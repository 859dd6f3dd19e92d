"""The repo_tasks env: repository snapshots, sandboxed file/shell tools, hidden-test rewards."""

from envs.repo_tasks.env import DEFAULT_TASKS, RepoTaskEnv, check_task, load_repo_tasks
from envs.repo_tasks.formats import (
    TaskFormatError,
    apply_patch,
    load_harbor_task,
    load_harbor_tasks,
    load_swebench_instance,
)

__all__ = [
    "DEFAULT_TASKS",
    "RepoTaskEnv",
    "TaskFormatError",
    "apply_patch",
    "check_task",
    "load_harbor_task",
    "load_harbor_tasks",
    "load_repo_tasks",
    "load_swebench_instance",
]

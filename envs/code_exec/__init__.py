"""The code_exec env: programming tasks, a sandboxed python tool, hidden-test rewards."""

from envs.code_exec.env import DEFAULT_DATA, CodeExecEnv, load_tasks
from envs.code_exec.grading import GradeResult, extract_code, grade

__all__ = ["DEFAULT_DATA", "CodeExecEnv", "GradeResult", "extract_code", "grade", "load_tasks"]

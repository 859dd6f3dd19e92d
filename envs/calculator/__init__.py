"""The calculator env: arithmetic problems solved with a calculator tool."""

from envs.calculator.env import CalculatorEnv, demonstration, extract_answer
from envs.calculator.tasks import generate_tasks

__all__ = ["CalculatorEnv", "demonstration", "extract_answer", "generate_tasks"]

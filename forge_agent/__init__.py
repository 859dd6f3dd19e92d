"""forge-agent: a PyTorch-native framework for training tool-using LLM agents with RL."""

from forge_agent import moved as _moved

__version__ = "0.1.0"

_moved.install()  # an old module path fails naming its new home (forge_agent/moved.py)

"""forge-agent: a PyTorch-native framework for training tool-using LLM agents with RL."""

__version__ = "0.1.0"

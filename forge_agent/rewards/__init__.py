"""Rewards: reward functions, the weighted `Rubric`, and the `RewardActor` (in `.actor`)."""

from forge_agent.rewards.functions import (
    RewardFn,
    RewardValue,
    boxed_answer_match,
    env_outcome,
    extract_boxed,
    final_answer_text,
    length_penalty,
    model_judge,
    program_reward,
    thinking_format,
    tool_use,
)
from forge_agent.rewards.rubric import (
    RewardComponent,
    RewardResult,
    Rubric,
    apply_result,
    reward_metrics,
)

__all__ = [
    "RewardComponent",
    "RewardFn",
    "RewardResult",
    "RewardValue",
    "Rubric",
    "apply_result",
    "boxed_answer_match",
    "env_outcome",
    "extract_boxed",
    "final_answer_text",
    "length_penalty",
    "model_judge",
    "program_reward",
    "reward_metrics",
    "thinking_format",
    "tool_use",
]

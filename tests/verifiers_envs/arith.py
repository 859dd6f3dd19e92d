"""A single-turn verifiers environment: verifiers' own ReasoningGymEnv over basic_arithmetic
(XMLParser, a rubric with an answer reward and a weight-0 format metric)."""

import verifiers as vf


def load_environment(num_train_examples: int = 64, num_eval_examples: int = 16) -> vf.Environment:
    return vf.ReasoningGymEnv(
        gym="basic_arithmetic",
        num_train_examples=num_train_examples,
        num_eval_examples=num_eval_examples,
        system_prompt="Answer inside <answer></answer>.",
    )

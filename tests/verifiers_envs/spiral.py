"""verifiers' own ReasoningGymEnv over spiral_matrix, whose scorer `eval`s the answer."""

import verifiers as vf


def load_environment(num_train_examples: int = 8, num_eval_examples: int = 4) -> vf.Environment:
    return vf.ReasoningGymEnv(
        gym="spiral_matrix",
        num_train_examples=num_train_examples,
        num_eval_examples=num_eval_examples,
        system_prompt="Answer inside <answer></answer>.",
    )

"""A multi-turn verifiers environment without tools: the environment answers each guess with
"higher" or "lower" (its `env_response`) until the guess is right or the turns run out."""

import verifiers as vf
from datasets import Dataset


class GuessEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        guess = str(self.parser.parse_answer(messages) or "").strip()
        target = int(state["answer"])
        if guess.isdigit() and int(guess) == target:
            state["final_env_response"] = [vf.UserMessage(content="correct")]
            return state["final_env_response"]
        hint = "higher" if not guess.isdigit() or int(guess) < target else "lower"
        return [vf.UserMessage(content=hint)]


def load_environment(max_turns: int = 4) -> vf.Environment:
    rows = [{"question": "Guess my number (1-30).", "answer": str(n)} for n in range(1, 31)]
    parser = vf.XMLParser(fields=["answer"])

    def solved(state, **kwargs) -> float:
        return float(bool(state.get("final_env_response")))

    return GuessEnv(
        dataset=Dataset.from_list(rows),
        max_turns=max_turns,
        system_prompt="Reply <answer>N</answer>.",
        parser=parser,
        rubric=vf.Rubric(parser=parser, funcs=[solved]),
    )

"""A multi-turn tool environment in verifiers' classic API: the model looks words up with a
tool, then answers; the rubric rewards the right answer (through the parser) and a call."""

import verifiers as vf
from datasets import Dataset

CODES = {"apple": "A17", "river": "R42", "stone": "S08", "cloud": "C99", "flame": "F31"}


def lookup(word: str) -> str:
    """Look up the code of a word.

    Args:
        word: The word to look up.
    """
    return CODES.get(word.strip().lower(), "unknown word")


def load_environment(max_turns: int = 3) -> vf.Environment:
    rows = [
        {"question": f"What is the code of {word}? Use the lookup tool.", "answer": code}
        for word, code in CODES.items()
    ]
    parser = vf.XMLParser(fields=["answer"])

    def correct_answer(completion, answer, **kwargs) -> float:
        return float(str(parser.parse_answer(completion)).strip() == answer)

    def called_lookup(completion, **kwargs) -> float:
        return float(any(getattr(m, "tool_calls", None) for m in completion))

    rubric = vf.Rubric(parser=parser, funcs=[correct_answer, called_lookup], weights=[1.0, 0.2])
    return vf.ToolEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:2]),
        tools=[lookup],
        max_turns=max_turns,
        system_prompt="Use the lookup tool, then reply <answer>CODE</answer>.",
        parser=parser,
        rubric=rubric,
    )

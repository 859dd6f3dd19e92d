"""A single-turn verifiers environment scored by a model (verifiers' JudgeRubric), whose judge
endpoint is never reached here (no network in the tests)."""

import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI


def load_environment() -> vf.Environment:
    rows = [{"question": "What is 2 + 2?", "answer": "4"}] * 4
    client = AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows), rubric=vf.JudgeRubric(judge_client=client)
    )

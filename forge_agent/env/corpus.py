"""An env's tokenizer text: its optional `corpus()` hook (strings and conversations), else
the rendered reset messages and tool specs of its first training tasks. The tiny model's
tokenizer (`forge_agent.models.tiny`) is trained on the corpus of `model.tiny.corpus_envs`.
"""

from __future__ import annotations

import functools

from forge_agent.env.demonstrations import Conversation, as_conversation, run_sync, tool_specs_of
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

__all__ = ["CORPUS_TASKS", "corpus_of"]

CORPUS_TASKS = 32
"""Tasks whose reset messages make the corpus of an env without a `corpus()`."""


def corpus_of(env: ResolvedEnv) -> list[str | Conversation]:
    """Tokenizer text of `env`: its `corpus()` (strings and conversations), else the
    rendered reset messages and tool specs of its first training tasks."""
    instance = env.make()
    hook = getattr(instance, "corpus", None)
    if callable(hook):
        specs = functools.cache(lambda: tool_specs_of(instance))
        return [as_conversation(item, specs) for item in hook()]
    tasks = load_tasks(env, "train", CORPUS_TASKS, seed=0)

    async def resets() -> list[Conversation]:
        out = []
        try:
            for i, task in enumerate(tasks):
                messages, tools = await instance.reset(task, i)
                out.append((list(messages), list(tools)))
        finally:
            await instance.close()
        return out

    return list(run_sync(resets()))

"""Demonstrations as trajectories: an env's conversations (its `demonstrations()`, or calls
sampled from its tool schemas) rendered exactly as a rollout would see them, so the loss mask
covers exactly the assistant's sampled tokens; and what the warm-started policy's longest
demonstrated turns say about the rollout's token limits (`demo_fit_warnings`).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge_agent.env.demonstrations import demonstrations_of
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.episode import cut_message
from forge_agent.rollout.history import TokenHistory
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.toolkit.schema import ToolSchemaError
from forge_agent.types import Message, ToolSpec, Trajectory
from forge_agent.warm_start.config import DemoCap
from forge_agent.warm_start.schema_demos import schema_demonstrations

__all__ = [
    "DEMO_LENGTHS_FILE",
    "TurnWriter",
    "assistant_tokens",
    "cap_cuts",
    "demo_fit_warnings",
    "demo_lengths",
    "demo_trajectory",
    "demonstration_source",
    "demonstrations",
]


def demo_trajectory(
    renderer: ChatRenderer,
    messages: list[Message],
    tools: list[ToolSpec],
    task_id: str = "demo",
    cap: DemoCap | None = None,
    whole: bool = False,
    writer: TurnWriter | None = None,
) -> Trajectory:
    """Token ids and loss mask of a conversation, as the policy would have produced it
    (written through the rollouts' token history: assistant turns are mask 1, version 0).

    Rendered once, append-only, as a rollout's history is: the opening (the messages before
    the first assistant turn) as a full render, each assistant turn as the policy would sample
    it (`writer`, default `TurnWriter.for_opening`: not after the whole conversation so far),
    each reply bridged on. `cap` (`DemoCap`): the run's episode limits; a demonstration that
    passes one is cut there, ending with its last assistant turn that fits, and
    `info["demo_cut"]` names what cut it ("rollout.max_turns=4", ...). `whole`: write each
    turn after the whole conversation so far instead (`assistant_tokens`: quadratic in turns,
    the reference the warm start checks `TurnWriter` against on each env's first
    demonstration)."""
    cap = cap or DemoCap()
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    opening = list(messages[:first])
    traj = Trajectory(task_id=task_id, group_id=task_id, messages=list(messages))
    history = TokenHistory(traj)
    if not whole and writer is None:
        writer = TurnWriter.for_opening(renderer, opening, tools, task_id)
    if writer is None or whole:
        history.start_segment(renderer.render_prompt(opening, tools))
    else:
        history.start_segment(writer.opening(opening, tools))
    seen = [*opening, messages[first]]  # what the policy saw and said, replies as cut
    cut: list[str] = []

    def turn(prompt: list[int], said: list[Message]) -> list[int]:
        if whole or writer is None:
            return assistant_tokens(renderer, prompt, said, tools, task_id)
        return writer.tokens(said[-1])

    i, completion = first, turn(history.prompt, seen)
    while True:
        history.record_turn(completion, [0.0] * len(completion), [0] * len(completion))
        later = range(i + 1, len(messages))
        j = next((k for k in later if messages[k]["role"] == "assistant"), None)
        if j is None:
            seen += messages[i + 1 :]
            break
        if cap.max_turns is not None and len(traj.turn_spans) >= cap.max_turns:
            cut.append(f"rollout.max_turns={cap.max_turns}")
            break
        replies = list(messages[i + 1 : j])
        if cap.tool_output_tokens is not None:
            limit = cap.tool_output_tokens
            replies = [cut_message(renderer, m, limit) for m in replies]
            if replies != messages[i + 1 : j]:
                cut.append(f"rollout.tool_output_tokens={limit}")
        bridged = history.next_prompt(renderer, replies, tools)
        if bridged is None:
            raise ValueError(f"could not bridge demonstration {task_id!r} append-only")
        said = [*seen, *replies, messages[j]]
        following = turn(bridged, said)
        budget = cap.max_total_tokens
        if budget is not None and len(bridged) + len(following) > budget:
            cut.append(f"rollout.max_total_tokens={budget}")
            break
        history.extend_to(bridged)
        seen, i, completion = said, j, following
    if cut:
        traj.messages = seen
        traj.info["demo_cut"] = ", ".join(dict.fromkeys(cut))
    return traj


def cap_cuts(cap: DemoCap, renderer: ChatRenderer, messages: list[Message]) -> list[str]:
    """The limits of `cap` that cut the conversation `messages` by its messages alone: more
    assistant turns than `max_turns`, a reply between two of them past `tool_output_tokens`
    (as `demo_trajectory` cuts it); `max_total_tokens` needs the render and is not looked at.
    [] when neither does."""
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    cuts = []
    if cap.max_turns is not None and len(turns) > cap.max_turns:
        cuts.append(f"rollout.max_turns={cap.max_turns}")
        turns = turns[: cap.max_turns]
    if cap.tool_output_tokens is not None and turns:
        replies = [m for m in messages[turns[0] : turns[-1]] if m["role"] != "assistant"]
        limit = cap.tool_output_tokens
        if any(cut_message(renderer, m, limit) != m for m in replies):
            cuts.append(f"rollout.tool_output_tokens={limit}")
    return cuts


TURN_CONTEXT: list[Message] = [{"role": "user", "content": "."}]
"""What `TurnWriter` writes an assistant turn after: one user query."""


class TurnWriter:
    """Assistant turns as the policy would sample them: a turn's text as the renderer writes
    a conversation's last turn, tokenized on its own (a full render may merge tokens across the
    prompt boundary), through the turn's stop token.

    The turn is rendered after a short `context` (`TURN_CONTEXT`, no tools), not after every
    turn before it: one short render a turn, so a demonstration costs linear time in its turns,
    not quadratic (a Gymnasium game of 50 moves took 0.6 s), and one writer serves every
    demonstration of an env, remembering the turns it wrote (a game's moves repeat). The
    project's renderers write an assistant turn alike after any context that ends in a user
    query (Qwen3's: after the last user query, as the last turn; the text-tool families';
    Llama 3's); a model's own chat template (`renderer.kind=default`) may not, so it gets a
    writer per demonstration, after that demonstration's own opening (`for_opening`).
    `demonstration_trajectories` checks each env's first demonstration against
    `assistant_tokens` (the whole conversation rendered) and renders whole where they differ."""

    def __init__(
        self,
        renderer: ChatRenderer,
        context: list[Message] | None = None,
        tools: list[ToolSpec] | None = None,
        task_id: str = "demo",
    ) -> None:
        self.renderer, self.tools, self.task_id = renderer, tools, task_id
        self.context = list(context or TURN_CONTEXT)
        prompt = renderer.render_prompt(self.context, tools)
        self.prefix = renderer.tokenizer.decode(prompt)
        self._written: dict[str, list[int]] = {}
        self._openings: dict[str, list[int]] = {}

    @classmethod
    def shared(cls, renderer: ChatRenderer) -> TurnWriter | None:
        """A writer for every demonstration of an env; None for a model's own chat template
        (each demonstration then gets its own, `for_opening`)."""
        return None if renderer.kind == "default" else cls(renderer)

    @classmethod
    def for_opening(
        cls, renderer: ChatRenderer, opening: list[Message], tools: list[ToolSpec], task_id: str
    ) -> TurnWriter:
        """The writer of one demonstration: `shared`'s, or one after its `opening`."""
        if renderer.kind == "default":
            return cls(renderer, opening, tools, task_id)
        return cls(renderer, task_id=task_id)

    def opening(self, messages: list[Message], tools: list[ToolSpec]) -> list[int]:
        """The prompt of a demonstration's opening `messages` (a full render, remembered: a
        game's openings repeat)."""
        key = json.dumps([messages, tools], sort_keys=True, default=str)
        if key not in self._openings:
            self._openings[key] = self.renderer.render_prompt(messages, tools)
        return list(self._openings[key])

    def tokens(self, message: Message) -> list[int]:
        """The assistant `message` as completion tokens."""
        key = json.dumps(message, sort_keys=True, default=str)
        if key not in self._written:
            full = self.renderer.render_full([*self.context, message], self.tools)
            self._written[key] = _turn_tokens(self.renderer, self.prefix, full, self.task_id)
        return list(self._written[key])


def assistant_tokens(
    renderer: ChatRenderer,
    context: list[int],
    messages: list[Message],
    tools: list[ToolSpec],
    task_id: str,
) -> list[int]:
    """The last assistant message as the policy would sample it after `context` (the tokens of
    `messages[:-1]` and the generation prompt): the whole conversation rendered and decoded,
    the last turn's text tokenized on its own (a full render may merge tokens across the prompt
    boundary), through the turn's stop token."""
    prefix = renderer.tokenizer.decode(context)
    return _turn_tokens(renderer, prefix, renderer.render_full(messages, tools), task_id)


def _turn_tokens(renderer: ChatRenderer, prefix: str, full: list[int], task_id: str) -> list[int]:
    tok = renderer.tokenizer
    full_text = tok.decode(full)
    if not full_text.startswith(prefix):
        raise ValueError(f"renderer is not prefix-stable on demonstration {task_id!r}")
    completion = tok.encode(full_text[len(prefix) :], add_special_tokens=False)
    stop = next((k for k, t in enumerate(completion) if t in renderer.stop_token_ids), None)
    return completion if stop is None else completion[: stop + 1]


def demonstrations(
    env: ResolvedEnv, n: int, demo_fraction: float, seed: int, max_turns: int | None = None
) -> tuple[list[list[Message]], list[ToolSpec]]:
    """`n` conversations of `env` from the env's `demonstrations(n, seed, demo_fraction)`
    hook, and the tool specs they were written against. `max_turns`: the assistant turns a
    conversation needs at most, for a hook that can stop there (`env_demonstrations`).

    Raises `EnvSetupError` when the env has none (`has_demonstrations` checks first).
    """
    convos = demonstrations_of(env, n, seed, demo_fraction, max_turns)
    if not convos:  # an env without demonstrations: calls sampled from its tool schemas
        convos = schema_demonstrations(env, n, seed)
    if not convos:
        raise EnvSetupError(
            env.id,
            "its demonstrations()",
            "no demonstrations for the warm start and no tools to build them from (give the "
            "env class a `demonstrations(n, seed, demo_fraction)` method, or set "
            "warm_start.enabled=false)",
        )
    return [messages for messages, _ in convos], convos[0][1]


def demonstration_source(env: ResolvedEnv) -> str | None:
    """Where `env`'s warm start comes from: "demonstrations" (the env's own, or for an
    agent program those of its `tasks_from` env), "tool schemas" (`schema_demonstrations`:
    calls sampled from the env's tool schemas, for an env without demonstrations), or None
    (no demonstrations and no tools: the warm start is skipped)."""
    try:
        if demonstrations_of(env, 1, 0, 0.5):
            return "demonstrations"
        if schema_demonstrations(env, 1, 0):
            return "tool schemas"
    except EnvSetupError:
        raise
    except ToolSchemaError as exc:  # the env's tools, not its demonstrations(), are at fault
        raise EnvSetupError(env.id, "its tools", str(exc)) from exc
    except Exception as exc:  # a broken hook must not quietly skip the warm start
        raise EnvSetupError(
            env.id,
            "its demonstrations() (or a reset for demonstrations from its tool schemas)",
            f"raised {type(exc).__name__}: {exc!r} (fix the env, or set warm_start.enabled=false)",
        ) from exc
    return None


DEMO_LENGTHS_FILE = "demonstration_lengths.json"
"""Written into a warm-start folder: the longest demonstrated turn and episode, in tokens."""


def demo_lengths(demos: list[Trajectory]) -> dict[str, int]:
    """The longest assistant turn (a run of loss tokens, its stop token included) and the
    longest whole episode of the demonstrations, in tokens."""
    turn = episode = 0
    for traj in demos:
        episode = max(episode, len(traj.token_ids))
        run = 0
        for m in traj.loss_mask:
            run = run + 1 if m else 0
            turn = max(turn, run)
    return {"turn_tokens": turn, "episode_tokens": episode}


def demo_fit_warnings(policy: Path, rollout: RolloutConfig) -> list[str]:
    """What of the warm start's demonstrations the rollout limits cut off: a turn longer than
    `rollout.max_new_tokens_per_turn` or an episode longer than `rollout.max_total_tokens`
    (the policy is taught calls it is then never let finish: they end `truncated_length` and
    RL sees only the episodes that skip them; with a `rollout.context` strategy an episode is
    compacted, not cut). [] when they fit or the folder predates the record."""
    path = Path(policy) / DEMO_LENGTHS_FILE
    if not path.exists():
        return []
    lengths = json.loads(path.read_text())
    out = []
    for key, measured, what in (
        ("max_new_tokens_per_turn", lengths["turn_tokens"], "turn"),
        ("max_total_tokens", lengths["episode_tokens"], "episode"),
    ):
        limit = getattr(rollout, key)
        if key == "max_total_tokens" and rollout.context.strategy != "keep":
            continue  # a context strategy compacts an episode past the limit instead of cutting
        if measured > limit:
            out.append(
                f"rollout.{key}={limit} is shorter than the warm start's longest demonstrated "
                f"{what} ({measured} tokens): the policy's {what}s like it will be cut off "
                f"(truncated_length); set rollout.{key}={measured} or more"
            )
    return out

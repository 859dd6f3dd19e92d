"""The token history and context strategies: episodes whose transcripts outgrow the context.

Each test runs episodes of `LongOutputEnv` (every step answers with a long tool output) against
the real vLLM CPU engine, then checks the trajectory token by token against the prompts the
generator was actually sent (recorded on the way)."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.rollout import ChatRenderer, ContextConfig, LocalEnvs, RolloutConfig, RolloutRunner
from forge_agent.rollout.context import DROPPED, drop_tool_outputs
from forge_agent.rollout.history import TokenHistory
from forge_agent.trainer.packing import segments
from forge_agent.types import Status, Trajectory
from tests.rollout_envs import LongOutputEnv

LIMIT = 384  # tokens of one segment (prompt + turns)
TASK = {"task_id": "long", "prompt": "What is 12 * 7?", "answer": "84"}
TASK.update(steps=6, output_words=8)  # ~80 tokens an output (a tiny vocabulary)


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


class RecordingGenerate:
    """The real generator, with every (prompt, completion) it served kept."""

    def __init__(self, generator) -> None:
        self.generator = generator
        self.calls: list[tuple[list[int], list[int]]] = []

    async def __call__(self, ids, sampling, session):
        completion = await self.generator.generate.call_one(ids, sampling, session)
        self.calls.append((list(ids), list(completion.token_ids)))
        return completion


def _run(generator, renderer, context: ContextConfig, task=TASK, n=2, max_turns=8, limit=LIMIT):
    gen = RecordingGenerate(generator)
    config = RolloutConfig(
        max_turns=max_turns,
        max_total_tokens=limit,
        max_new_tokens_per_turn=40,
        tool_output_tokens=200,
        context=context,
    )
    engine = RolloutRunner(gen, LocalEnvs(LongOutputEnv), renderer, config)
    trajs = asyncio.run(_gather(engine, task, n))
    return trajs, gen


async def _gather(engine, task, n):
    episodes = await asyncio.gather(*(engine.run_episode(task, seed=0) for _ in range(n)))
    return [traj for (traj,) in episodes]


def _check_token_exact(traj: Trajectory, calls: list[tuple[list[int], list[int]]]) -> None:
    """Every turn was sampled on exactly the tokens before it in its own segment, and its
    tokens are the sampler's; nothing else carries the loss."""
    served = {tuple(prompt + completion) for prompt, completion in calls}
    starts = sorted(set(traj.segment_starts))
    n = len(traj.token_ids)
    assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
    for s, e in traj.turn_spans:
        seg = max(x for x in starts if x <= s)
        assert tuple(traj.token_ids[seg:e]) in served, "a turn not sampled on its segment"
        assert all(traj.loss_mask[s:e]) and all(v >= 0 for v in traj.versions[s:e])
    sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
    assert {i for i, m in enumerate(traj.loss_mask) if m} == sampled


def test_keep_cuts_the_episode_at_the_context(generator, renderer):
    trajs, _ = _run(generator, renderer, ContextConfig(strategy="keep"))
    for traj in trajs:
        assert traj.status == Status.TRUNCATED_LENGTH
        assert traj.segment_starts == [0]
        assert traj.turn_spans[-1][1] <= LIMIT  # every turn was sampled within the context


def test_an_episode_cut_by_turns_ends_with_the_envs_last_answer(generator, renderer):
    trajs, _ = _run(generator, renderer, ContextConfig(), max_turns=2, limit=1024)
    for traj in trajs:
        assert traj.status == Status.TRUNCATED_TURNS, traj.info.get("error")
        assert traj.messages[-1]["role"] == "tool"  # the answer to its last move, kept
        assert traj.token_ids[traj.turn_spans[-1][1] :]  # and its tokens, after the last turn
        tail = renderer.tokenizer.decode(traj.token_ids[traj.turn_spans[-1][1] :])
        assert "result2-0" in tail


def test_dropping_tool_outputs_runs_past_the_context_token_exactly(generator, renderer):
    trajs, gen = _run(generator, renderer, ContextConfig(strategy="drop_tool_outputs"), n=4)
    assert {t.status for t in trajs} <= {Status.OK, Status.TRUNCATED_LENGTH}  # a turn may hit
    finished = [t for t in trajs if t.status == Status.OK]  # its 40-token cap (temperature 1)
    assert len(finished) >= 2
    for traj in trajs:
        _check_token_exact(traj, gen.calls)
    for traj in finished:
        assert traj.reward == 1.0
        assert len(traj.token_ids) > LIMIT  # the episode ran past the context
        assert len(traj.segment_starts) > 1 and traj.info["context_rewrites"] >= 1
        for start, end in segments(traj):  # every turn was sampled within its segment's context
            assert all(e - start <= LIMIT for s, e in traj.turn_spans if start <= s < end)
        _check_token_exact(traj, gen.calls)
        # the transcript keeps every tool output; some prompt the policy saw had one dropped
        assert not any(m.get("content") == DROPPED for m in traj.messages)
        assert sum(m["role"] == "tool" for m in traj.messages) == TASK["steps"] - 1
        dropped = renderer.tokenizer.encode(DROPPED, add_special_tokens=False)
        text = renderer.tokenizer.decode(traj.token_ids)
        assert renderer.tokenizer.decode(dropped) in text


def test_segments_share_the_episodes_reward_and_advantage(generator, renderer):
    trajs, _ = _run(generator, renderer, ContextConfig(strategy="drop_tool_outputs"), n=4)
    traj = next(t for t in trajs if t.status == Status.OK and len(t.segment_starts) > 1)
    traj.advantage = 0.75
    advantages = traj.token_advantages()
    for start, end in segments(traj):
        sampled = [advantages[i] for i in range(start, end) if traj.loss_mask[i]]
        assert sampled and all(a == 0.75 for a in sampled)


def keep_task_and_last_two(messages, tools, budget, count):
    """A user's strategy: the task, then only the last two messages."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[:first] + messages[-2:]


async def summarise_as_one_line(messages, tools, budget, count):
    """An async user's strategy: earlier turns replaced by one summary line."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    summary = {"role": "user", "content": f"(summary: {len(messages) - first - 2} messages)"}
    return [*messages[:first], summary, *messages[-2:]]


@pytest.mark.parametrize(
    "strategy",
    ["tests.test_context:keep_task_and_last_two", "tests.test_context:summarise_as_one_line"],
)
def test_a_users_function_rewrites_what_the_policy_sees(generator, renderer, strategy):
    trajs, gen = _run(generator, renderer, ContextConfig(strategy=strategy), n=4)
    # sampled at temperature 1.0, a turn may run to its 40-token cap after the rewrite (an odd
    # view for a policy warm-started on whole transcripts): cut, but never past the context
    assert {t.status for t in trajs} <= {Status.OK, Status.TRUNCATED_LENGTH}
    assert any(t.status == Status.OK for t in trajs)
    for traj in trajs:
        _check_token_exact(traj, gen.calls)
        if traj.status == Status.OK:  # it ran to the end: past the context, rewritten
            assert traj.info["context_rewrites"] >= 1 and len(traj.segment_starts) > 1
        # every segment is a full render of what the policy saw: the task, then what was kept
        for start, end in segments(traj):
            first_turn = min(s for s, _ in traj.turn_spans if start <= s < end)
            assert TASK["prompt"] in renderer.tokenizer.decode(traj.token_ids[start:first_turn])


def test_a_strategy_that_cannot_be_imported_is_a_config_error():
    from forge_agent.typed_config import ConfigError

    with pytest.raises(ConfigError, match="no_such_module_xyz"):
        ContextConfig(strategy="no_such_module_xyz:fn")


def test_drop_tool_outputs_keeps_the_task_and_the_newest_output():
    messages = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a"}]
    for k in range(4):
        messages += [{"role": "tool", "content": f"out{k} " * 50}, {"role": "assistant"}]

    def count(ms):
        return sum(len(str(m.get("content", ""))) for m in ms)

    out = drop_tool_outputs(messages, budget=300, count=count, keep_last=1)
    tools = [m["content"] for m in out if m["role"] == "tool"]
    assert tools[:3] == [DROPPED] * 3 and tools[3].startswith("out3")
    assert out[0]["content"] == "task"
    assert messages[2]["content"].startswith("out0")  # the input is not modified


def test_history_appends_token_exactly_and_a_rewrite_starts_a_segment():
    traj = Trajectory(task_id="t", group_id="g")
    history = TokenHistory(traj)
    history.start_segment([1, 2, 3])
    assert history.record_turn([4, 5], [-0.5, -0.25], [7, 7]) == (3, 5)
    history.extend_to([1, 2, 3, 4, 5, 6])
    history.record_turn([8], [-1.0], [8])
    history.start_segment([1, 9])
    assert traj.token_ids == [1, 2, 3, 4, 5, 6, 8, 1, 9]
    assert traj.loss_mask == [0, 0, 0, 1, 1, 0, 1, 0, 0]
    assert traj.logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -1.0, 0.0, 0.0]
    assert traj.versions == [-1, -1, -1, 7, 7, -1, 8, -1, -1]
    assert traj.segment_starts == [0, 7] and traj.turn_spans == [(3, 5), (6, 7)]
    with pytest.raises(ValueError, match="does not extend"):
        history.extend_to([1])

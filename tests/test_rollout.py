"""Multi-turn rollouts with the real vLLM CPU engine (in a Monarch actor) and real env workers."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.env import EnvConfig, EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.observability.traces import TraceWriter, read_traces
from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner
from forge_agent.types import Status, Trajectory
from tests.rollout_envs import EchoToolEnv


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def _actor_generate(generator):
    return lambda ids, sampling, session: generator.generate.call_one(ids, sampling, session)


def _check_invariants(traj: Trajectory, prompt_len: int) -> None:
    """Token accounting: ids = prompt + sampled + env tokens, exactly, and per-token arrays
    line up with the sampled tokens."""
    n = len(traj.token_ids)
    assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
    sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
    assert {i for i, m in enumerate(traj.loss_mask) if m == 1} == sampled
    for i in range(n):
        if traj.loss_mask[i]:
            assert traj.versions[i] >= 0 and traj.logprobs[i] <= 0.0
        else:
            assert traj.versions[i] == -1 and traj.logprobs[i] == 0.0
    assert all(s >= prompt_len for s, _ in traj.turn_spans)


def _prompt_len(renderer, traj: Trajectory, tools) -> int:
    first_assistant = next(i for i, m in enumerate(traj.messages) if m["role"] == "assistant")
    prompt = renderer.render_prompt(traj.messages[:first_assistant], tools)
    assert traj.token_ids[: len(prompt)] == prompt  # the first prompt is a plain full render
    return len(prompt)


@pytest.mark.parametrize(
    ("env_id", "tasks"),
    [
        ("calculator", "calculator"),
        ("code_exec", "code_exec"),
    ],
)
def test_real_multi_turn_episodes_keep_every_token_accounted_for(
    generator, renderer, tiny_tokenizer, env_id, tasks
):
    if tasks == "calculator":
        from envs.calculator import generate_tasks

        task_list = generate_tasks(4, seed=3)
    else:
        from envs.code_exec.env import load_tasks

        task_list = load_tasks()[:4]

    async def run():
        async with EnvPool(ResolvedEnv.of(env_id), size=8) as pool:
            engine = RolloutRunner(
                _actor_generate(generator),
                pool,
                renderer,
                RolloutConfig(max_turns=3, max_total_tokens=640, max_new_tokens_per_turn=96),
            )
            groups = await engine.run_groups([(t, 0) for t in task_list], group_size=4)
            specs_env = await pool.acquire()
            _, tools = await specs_env.reset(task_list[0], 0)
            await specs_env.close()
            return groups, tools, engine.stats

    groups, tools, stats = asyncio.run(run())
    trajs = [t for g in groups for t in g.trajectories]
    assert len(trajs) == 16
    multi_turn = [t for t in trajs if len(t.turn_spans) >= 2]
    assert multi_turn, "the warm-started policy should call a tool in some episodes"
    assert any(t.tool_call_count > 0 for t in multi_turn)
    assert stats["bridge_fallbacks"] == 0  # Qwen3 rendering bridges append-only
    for traj in trajs:
        assert traj.status not in (Status.ENV_ERROR, Status.ENV_TIMEOUT, Status.GENERATOR_ERROR)
        _check_invariants(traj, _prompt_len(renderer, traj, tools))
        # Re-tokenizing is what we must never do: decoding and re-encoding the sampled turns
        # need not give back the same ids, but the trajectory keeps the sampled ids verbatim.
        for s, e in traj.turn_spans:
            assert traj.token_ids[s:e]  # non-empty turns
    for group in groups:
        prompts = {tuple(t.token_ids[: t.turn_spans[0][0]]) for t in group.trajectories}
        assert len(prompts) == 1  # one env start state per group
        assert len({t.group_id for t in group.trajectories}) == 1


def test_weights_changed_between_turns_show_two_versions_in_one_trajectory(
    generator, renderer, policy_model_path
):
    import torch
    from transformers import AutoModelForCausalLM

    from envs.calculator import generate_tasks

    weights = AutoModelForCausalLM.from_pretrained(policy_model_path, dtype=torch.float32)
    state = {k: v.clone() for k, v in weights.state_dict().items()}
    calls = {"n": 0}

    async def generate_then_update(ids, sampling, session):
        completion = await generator.generate.call_one(ids, sampling, session)
        calls["n"] += 1
        if calls["n"] == 1:  # after the first turn, before the second
            version = await generator.version.call_one()
            await generator.update_weights.call_one(version + 1, state)
        return completion

    async def run():
        async with EnvPool(ResolvedEnv.of("calculator"), size=2) as pool:
            engine = RolloutRunner(generate_then_update, pool, renderer, RolloutConfig())
            for task in generate_tasks(8, seed=11):
                (traj,) = await engine.run_episode(task, 0)
                if len(traj.turn_spans) >= 2:
                    return traj
                calls["n"] = 0
        return None

    traj = asyncio.run(run())
    assert traj is not None, "no episode called the tool"
    first, second = traj.turn_spans[0], traj.turn_spans[1]
    v1 = set(traj.versions[first[0] : first[1]])
    v2 = set(traj.versions[second[0] : second[1]])
    assert len(v1) == 1 and len(v2) == 1
    assert v2.pop() == v1.pop() + 1
    assert traj.min_version < max(traj.versions)


class _FailingGenerate:
    async def __call__(self, ids, sampling, session):
        raise RuntimeError("engine exploded")


def test_failures_become_statuses_not_exceptions(generator, renderer):
    from envs.calculator import generate_tasks

    task = generate_tasks(1, seed=5)[0]
    sampled = _actor_generate(generator)

    async def gen(ids, sampling, session):  # every turn reaches the env's step (never cut)
        completion = await sampled(ids, sampling, session)
        completion.finish_reason = "stop"
        return completion

    async def run():
        out = {}
        (out["generator"],) = await RolloutRunner(
            _FailingGenerate(), LocalEnvs(EchoToolEnv), renderer
        ).run_episode(task, 0)
        (out["too_long"],) = await RolloutRunner(
            gen, LocalEnvs(EchoToolEnv), renderer, RolloutConfig(max_total_tokens=8)
        ).run_episode(task, 0)
        async with EnvPool(ResolvedEnv.of("tests.rollout_envs:CrashingEnv"), size=1) as pool:
            (out["crash"],) = await RolloutRunner(gen, pool, renderer).run_episode(task, 0)
        async with EnvPool(
            ResolvedEnv.of(
                EnvConfig("tests.rollout_envs:HangingEnv", kwargs={}, step_timeout_s=1.0)
            ),
            size=1,
        ) as pool:
            (out["hang"],) = await RolloutRunner(gen, pool, renderer).run_episode(task, 0)
            (out["after_hang"],) = await RolloutRunner(
                gen, pool, renderer, RolloutConfig(max_turns=1)
            ).run_episode(task, 0)
        return out

    out = asyncio.run(run())
    assert out["generator"].status == Status.GENERATOR_ERROR
    assert "engine exploded" in out["generator"].info["error"]
    assert out["too_long"].status == Status.PROMPT_TOO_LONG
    assert out["crash"].status == Status.ENV_ERROR
    assert out["hang"].status == Status.POLICY_TIMEOUT  # acting on its message hung: its failure
    # the pool replaced the hung worker: the next episode ran (and was cut at one turn)
    assert out["after_hang"].status != Status.ENV_ERROR
    assert len(out["after_hang"].turn_spans) == 1


def test_turn_limit_marks_truncated_turns_and_traces_are_written(generator, renderer, tmp_path):
    from envs.calculator import generate_tasks

    path = tmp_path / "traces.jsonl"
    writer = TraceWriter(path)

    async def run():
        engine = RolloutRunner(
            _actor_generate(generator),
            LocalEnvs(EchoToolEnv),
            renderer,
            RolloutConfig(max_turns=1),
            on_trajectory=writer.write,
        )
        return await engine.run_group(generate_tasks(1, seed=2)[0], 0, group_size=3)

    group = asyncio.run(run())
    writer.close()
    # EchoToolEnv never finishes on its own, so one turn is always cut by the turn limit
    # unless the model's turn ran out of tokens first.
    statuses = {t.status for t in group.trajectories}
    assert statuses <= {Status.TRUNCATED_TURNS, Status.TRUNCATED_LENGTH}
    assert all(len(t.turn_spans) == 1 for t in group.trajectories)
    records = read_traces(path)
    assert len(records) == 3
    assert all(r["num_sampled"] == sum(r["loss_mask"]) > 0 for r in records)

"""The replay buffer: the staleness bound per token, eviction, backpressure, resume."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.algorithms.replay import ReplayBuffer, check_token_lags, group_version, token_lags
from forge_agent.types import Group, Trajectory


def _traj(versions: list[int]) -> Trajectory:
    """A trajectory with a prompt token (not sampled) then one sampled token per version."""
    return Trajectory(
        task_id="t",
        group_id="g",
        token_ids=[1] * (1 + len(versions)),
        loss_mask=[0] + [1] * len(versions),
        logprobs=[0.0] * (1 + len(versions)),
        versions=[-1, *versions],
    )


def _group(name: str, *versions: list[int]) -> Group:
    return Group(task_id=name, trajectories=[_traj(v) for v in versions])


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_group_version_is_the_oldest_sampled_token():
    # the second trajectory's first turn came from version 2, its later tokens from 4
    g = _group("a", [3, 3], [2, 4])
    assert group_version(g) == 2
    assert token_lags(g.trajectories[1], 4) == [2, 0]  # the prompt token is not counted


def test_take_returns_fresh_groups_in_order():
    async def run():
        buf = ReplayBuffer(capacity=4, max_policy_lag=1)
        for name in ("a", "b", "c"):
            await buf.put(_group(name, [5]))
        return [g.task_id for g in await buf.take(2, current_version=5)], len(buf)

    assert _run(run()) == (["a", "b"], 1)


def test_bound_is_per_token_and_stale_groups_are_evicted_and_counted():
    async def run():
        buf = ReplayBuffer(capacity=8, max_policy_lag=2)
        await buf.put(_group("old_token", [5, 5], [3, 6]))  # one token 3 versions behind 6
        await buf.put(_group("edge", [4, 6]))  # exactly 2 behind: fresh
        await buf.put(_group("fresh", [6]))
        batch = await buf.take(2, current_version=6)
        return [g.task_id for g in batch], buf.evicted, buf.evicted_trajectories

    names, evicted, evicted_trajs = _run(run())
    assert names == ["edge", "fresh"]
    assert (evicted, evicted_trajs) == (1, 2)


def test_every_taken_token_respects_the_bound():
    async def run():
        buf = ReplayBuffer(capacity=16, max_policy_lag=1)
        taken = []
        for current in range(1, 8):
            for v in range(max(0, current - 3), current + 1):  # lags 0..3 arrive
                await buf.put(_group(f"{current}-{v}", [v, v]))
            taken += [(current, g) for g in await buf.take(2, current_version=current)]
        return taken, buf.evicted

    taken, evicted = _run(run())
    lags = [lag for cur, g in taken for t in g.trajectories for lag in token_lags(t, cur)]
    assert lags and max(lags) <= 1
    assert evicted > 0  # the run did offer stale groups, so the check above means something


def test_lag_zero_is_on_policy():
    async def run():
        buf = ReplayBuffer(capacity=4, max_policy_lag=0)
        await buf.put(_group("behind", [2]))
        await buf.put(_group("now", [3]))
        return [g.task_id for g in await buf.take(1, current_version=3)], buf.evicted

    assert _run(run()) == (["now"], 1)


def test_put_waits_while_full_and_take_frees_slots():
    async def run():
        buf = ReplayBuffer(capacity=2, max_policy_lag=0)
        await buf.put(_group("a", [0]))
        await buf.put(_group("b", [0]))
        third = asyncio.create_task(buf.put(_group("c", [0])))
        await asyncio.sleep(0.01)
        blocked = not third.done()
        await buf.take(1, current_version=0)
        await asyncio.wait_for(third, 1)
        return blocked, [g.task_id for g in await buf.take(2, current_version=0)]

    assert _run(run()) == (True, ["b", "c"])


def test_eviction_never_deadlocks_a_full_buffer_of_stale_groups():
    """The producer is blocked on a buffer full of stale groups, the trainer waits for fresh
    ones: the trainer's take evicts the stale groups, the producer's put goes through, and the
    trainer gets its batch."""

    async def run():
        buf = ReplayBuffer(capacity=2, max_policy_lag=1)
        await buf.put(_group("stale1", [0]))
        await buf.put(_group("stale2", [0]))

        async def producer():
            for i in range(2):
                await buf.put(_group(f"fresh{i}", [5]))

        prod = asyncio.create_task(producer())
        batch = await asyncio.wait_for(buf.take(2, current_version=5), 2)
        await asyncio.wait_for(prod, 2)
        return [g.task_id for g in batch], buf.evicted

    assert _run(run()) == (["fresh0", "fresh1"], 2)


def test_put_evicts_groups_that_a_newer_version_made_stale():
    async def run():
        buf = ReplayBuffer(capacity=1, max_policy_lag=1)
        await buf.put(_group("v0", [0]))
        await buf.set_version(2)  # the policy moved on while nobody took
        await asyncio.wait_for(buf.put(_group("v2", [2])), 1)  # no wait: the slot freed
        return [g.task_id for g in await buf.take(1, current_version=2)], buf.evicted

    assert _run(run()) == (["v2"], 1)


def test_a_take_larger_than_capacity_is_refused_not_awaited_forever():
    buf = ReplayBuffer(capacity=2, max_policy_lag=0)
    with pytest.raises(ValueError, match=r"groups_per_step must be <= training\.replay_capacity"):
        _run(buf.take(3, current_version=0))


@pytest.mark.parametrize(("capacity", "lag"), [(0, 0), (1, -1)])
def test_bad_settings_are_named(capacity, lag):
    with pytest.raises(ValueError, match=r"capacity|max_policy_lag"):
        ReplayBuffer(capacity, lag)


def test_resume_keeps_the_bound():
    """Groups saved with a checkpoint at version 5 are restored into a run resumed at version
    7: what the resumed policy may not train on is evicted at once, the counters carry over."""

    async def before():
        buf = ReplayBuffer(capacity=8, max_policy_lag=2)
        await buf.put(_group("v2", [2]))  # evicted before the checkpoint
        for v in (3, 4, 5):
            await buf.put(_group(f"v{v}", [v, v]))
        await buf.set_version(5)
        return buf.state_dict()

    state = _run(before())
    assert state["evicted"] == 1 and len(state["groups"]) == 3

    async def after():
        buf = ReplayBuffer(capacity=8, max_policy_lag=2)
        buf.load_state_dict(state, current_version=7)
        names = [g.task_id for g in await buf.take(1, current_version=7)]
        return names, len(buf), buf.evicted, buf.evicted_trajectories

    names, left, evicted, evicted_trajs = _run(after())
    assert names == ["v5"] and left == 0
    assert (evicted, evicted_trajs) == (3, 3)


def test_a_restored_buffer_admits_the_batch_of_its_restored_version():
    """On-policy, a trainer that died after its batch was taken goes back to a checkpoint at
    the same version: the restored buffer must admit that version's batch again (it used to
    stay closed, and the run waited forever)."""

    async def go():
        buf = ReplayBuffer(capacity=4, max_policy_lag=0)
        await buf.put(_group("v2", [2]))
        await buf.set_version(2)
        await buf.take(1, current_version=2)
        closed = buf.room(running=0, groups_per_step=1)
        buf.load_state_dict({"current_version": 2}, current_version=2)
        return closed, buf.room(running=0, groups_per_step=1)

    assert _run(go()) == (0, 1)


def test_resume_never_lowers_the_version_the_bound_is_checked_against():
    """A resumed run whose restored version is older than the buffer's (a mismatched
    checkpoint) keeps checking against the newer one, so staleness cannot overshoot."""
    state = {
        "groups": [{"task_id": "v1", "trajectories": [_traj([1]).to_json()]}],
        "current_version": 9,
    }
    buf = ReplayBuffer(capacity=4, max_policy_lag=2)
    buf.load_state_dict(state, current_version=0)
    assert len(buf) == 0 and buf.evicted == 1


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        # lag 0 with a sync every 2 steps: the generator's weights fall 1 version behind
        (["training.sync_interval=2"], "training.sync_interval"),
        (["training.max_policy_lag=1", "training.sync_interval=3"], "training.sync_interval"),
        (["training.groups_per_step=40"], "training.groups_per_step"),
    ],
)
def test_settings_the_bound_cannot_serve_are_refused_by_name(overrides, key):
    from forge_agent.run.config import load_config
    from forge_agent.typed_config import ConfigError

    with pytest.raises(ConfigError, match=rf"^{key}="):
        load_config(None, overrides)


def test_a_sync_interval_within_the_lag_is_accepted():
    from forge_agent.run.config import load_config

    cfg = load_config(None, ["training.max_policy_lag=2", "training.sync_interval=3"])
    assert cfg.training.max_policy_lag == 2  # one name, one meaning: not lag + interval - 1


def test_a_batch_over_the_bound_is_refused_before_training():
    batch = [_traj([4, 5]), _traj([2, 5])]
    assert check_token_lags(batch[:1], 5, max_policy_lag=1) == [1, 0]
    with pytest.raises(RuntimeError, match=r"sampled 3 versions before policy 5.*lag=2"):
        check_token_lags(batch, 5, max_policy_lag=2)


def test_on_policy_admission_starts_only_what_the_next_step_trains():
    """Lag 0: room for exactly one step's groups, none after the batch is taken until the
    policy moves on (a group started then would be sampled by the outgoing policy)."""

    async def run():
        buf = ReplayBuffer(capacity=8, max_policy_lag=0)
        rooms = [buf.room(running=0, groups_per_step=2), buf.room(running=1, groups_per_step=2)]
        await buf.put(_group("a", [0]))
        await buf.put(_group("b", [0]))
        rooms.append(buf.room(running=0, groups_per_step=2))
        await buf.take(2, current_version=0)
        rooms.append(buf.room(running=0, groups_per_step=2))  # trainer stepping: closed
        await buf.set_version(1)
        rooms.append(buf.room(running=0, groups_per_step=2))
        return rooms, buf.evicted

    assert _run(run()) == ([2, 1, 0, 0, 2], 0)


def test_async_admission_keeps_lag_plus_one_steps_in_flight():
    buf = ReplayBuffer(capacity=8, max_policy_lag=2)
    assert buf.room(running=0, groups_per_step=2) == 6
    assert buf.room(running=5, groups_per_step=2) == 1


def test_groups_that_never_carry_signal_are_named_then_stop_the_run():
    from forge_agent.algorithms.replay import ZeroSignalWatch

    warnings: list[str] = []
    watch = ZeroSignalWatch(warn_after=2, fail_after=9, warn=warnings.append)
    watch.observe(False, [0.0, 0.0], {"zero_variance": 2})
    watch.observe(True, [0.0, 1.0])  # a kept group resets the count
    for _ in range(4):
        watch.observe(False, [1.0, 1.0], {"zero_variance": 2})
    assert len(warnings) == 2  # after 2 in a row, then at 4
    assert "advantages.drop_zero_variance" in warnings[0] and "equal rewards" in warnings[0]
    assert "zero_variance 8" in warnings[1]  # 4 groups of 2
    with pytest.raises(RuntimeError, match="9 groups in a row were dropped"):
        for _ in range(5):
            watch.observe(False, [1.0, 1.0], {"zero_variance": 2})


def test_groups_lost_to_failures_are_blamed_on_the_failures_not_the_reward():
    from forge_agent.algorithms.replay import ZeroSignalWatch

    watch = ZeroSignalWatch(warn_after=100, fail_after=3)
    watch.observe(False, [0.0, 0.1, 0.0, 0.1], {"infra_failure": 3, "small_group": 1})
    watch.observe(False, [0.0, 0.0], {"zero_variance": 2})
    with pytest.raises(RuntimeError) as err:
        watch.observe(False, [0.1, 0.0], {"infra_failure": 2, "small_group": 1})
    message = str(err.value)
    assert "infra_failure 5, small_group 2, zero_variance 2" in message
    assert "env, generator or reward failures" in message
    assert "drop_zero_variance=false" not in message


def test_groups_lost_to_truncation_name_the_limits_that_cut_them():
    from forge_agent.algorithms.replay import ZeroSignalWatch

    watch = ZeroSignalWatch(warn_after=100, fail_after=2)
    watch.observe(False, [0.0, 0.5], {"truncated": 2})
    with pytest.raises(RuntimeError) as err:
        watch.observe(False, [0.5, 0.0], {"truncated": 2})
    message = str(err.value)
    assert "rollout.max_turns" in message and "rollout.max_total_tokens" in message
    assert "drop_zero_variance=false" not in message


def test_a_dropped_groups_empty_slot_is_never_stale():
    """Without dynamic sampling a dropped group keeps its slot in the step's batch as an empty
    group: it has no sampled token, so no version can make it stale (async or not)."""

    async def run():
        buf = ReplayBuffer(capacity=4, max_policy_lag=1)
        await buf.put(Group(task_id="dropped", trajectories=[]))
        await buf.put(_group("kept", [5]))
        await buf.set_version(6)
        return [g.task_id for g in await buf.take(2, current_version=6)], buf.evicted

    assert _run(run()) == (["dropped", "kept"], 0)


def test_reopen_admits_the_same_versions_batch_again():
    """On-policy, a batch whose every group was dropped trains nothing and the policy stays:
    `reopen` lets the rollout loop start that version's groups again."""

    async def run():
        buf = ReplayBuffer(capacity=4, max_policy_lag=0)
        await buf.put(Group(task_id="dropped", trajectories=[]))
        await buf.take(1, current_version=0)
        closed = buf.room(running=0, groups_per_step=1)
        await buf.reopen()
        return closed, buf.room(running=0, groups_per_step=1)

    assert _run(run()) == (0, 1)

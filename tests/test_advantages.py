"""Group advantages and filters against hand-computed values."""

from __future__ import annotations

import math

import pytest

from forge_agent.algorithms.advantages import AdvantageConfig, compute_advantages, group_advantages
from forge_agent.types import Group, Status, Trajectory


def group(rewards, statuses=None, task="t"):
    statuses = statuses or [Status.OK] * len(rewards)
    trajs = [
        Trajectory(task_id=task, group_id=f"{task}-{i}", reward=r, status=s)
        for i, (r, s) in enumerate(zip(rewards, statuses, strict=True))
    ]
    return Group(task_id=task, trajectories=trajs)


def test_grpo_normalises_by_sample_std():
    # mean = 0.5 ; sample std = sqrt(4 * 0.25 / 3) = 0.577350 ; A = +-0.5 / 0.577350 = +-0.866025
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], "grpo", eps=0.0)
    assert adv == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-6)


def test_dr_grpo_only_subtracts_the_mean():
    assert group_advantages([3.0, 1.0, 2.0], "dr_grpo") == pytest.approx([1.0, -1.0, 0.0])


def test_rloo_subtracts_leave_one_out_mean():
    # r=1: 1 - (0 + 0 + 1)/3 = 2/3 ; r=0: 0 - (1 + 0 + 1)/3 = -2/3
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], "rloo")
    assert adv == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_infra_failures_are_excluded_from_baseline_and_loss_not_scored_as_zero():
    g = group([1.0, 0.0, 0.0], [Status.OK, Status.OK, Status.ENV_ERROR])
    kept, stats = compute_advantages([g], AdvantageConfig(estimator="dr_grpo"))
    # baseline over the two valid members: mean 0.5 (scoring the failure as 0 would give 1/3)
    assert [t.advantage for t in kept] == pytest.approx([0.5, -0.5])
    assert g.trajectories[2] not in kept
    assert stats.dropped["infra_failure"] == 1 and stats.trajectories_kept == 2


def test_reward_errors_count_as_infra_failures_by_default():
    g = group([1.0, 0.0, 1.0])
    g.trajectories[2].info["reward_errors"] = {"judge": "TimeoutError: judge"}
    kept, stats = compute_advantages([g], AdvantageConfig(estimator="dr_grpo"))
    assert len(kept) == 2 and stats.dropped["infra_failure"] == 1


def test_truncated_mask_keeps_them_in_the_baseline_but_out_of_the_loss():
    g = group([1.0, 0.0, 0.0], [Status.OK, Status.OK, Status.TRUNCATED_LENGTH])
    kept, stats = compute_advantages([g], AdvantageConfig(estimator="dr_grpo", truncated="mask"))
    # mean over all three = 1/3 -> [2/3, -1/3]; the truncated one gets no loss
    assert [t.advantage for t in kept] == pytest.approx([2 / 3, -1 / 3])
    assert stats.dropped["truncated"] == 1


def test_truncated_drop_removes_them_from_the_baseline_too():
    g = group([1.0, 0.0, 0.0], [Status.OK, Status.OK, Status.TRUNCATED_TURNS])
    kept, _ = compute_advantages([g], AdvantageConfig(estimator="dr_grpo", truncated="drop"))
    assert [t.advantage for t in kept] == pytest.approx([0.5, -0.5])


def test_zero_variance_groups_are_dropped_and_counted():
    kept, stats = compute_advantages(
        [group([1.0, 1.0, 1.0], task="a"), group([0.0, 1.0], task="b")]
    )
    assert [t.task_id for t in kept] == ["b", "b"]
    assert stats.dropped["zero_variance"] == 3
    assert (stats.groups_in, stats.groups_kept) == (2, 1)
    assert stats.as_metrics()["advantages/dropped/zero_variance"] == 3.0


def test_zero_variance_groups_can_be_kept_with_zero_advantage():
    kept, _ = compute_advantages([group([1.0, 1.0])], AdvantageConfig(drop_zero_variance=False))
    assert [t.advantage for t in kept] == [0.0, 0.0]


def test_groups_left_with_one_member_are_dropped():
    g = group([1.0, 0.0], [Status.OK, Status.GENERATOR_ERROR])
    kept, stats = compute_advantages([g], AdvantageConfig(estimator="rloo"))
    assert kept == [] and stats.dropped["small_group"] == 1


def test_grpo_advantages_have_zero_mean_and_unit_sample_std():
    kept, _ = compute_advantages([group([0.2, 0.9, 0.4, 0.5])], AdvantageConfig(eps=0.0))
    a = [t.advantage for t in kept]
    mean = sum(a) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / 3)
    assert mean == pytest.approx(0.0, abs=1e-9) and std == pytest.approx(1.0)

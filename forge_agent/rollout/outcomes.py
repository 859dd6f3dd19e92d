"""What ends an episode and what it scores: a `Stop` (a status for every seat or for one), the
status an exception carries, a reward counted at a turn, and the cap on what an unfinished
one-seat episode earns. The episode's own endings (a forfeit, a failed step) are methods of
`forge_agent.rollout.episode.Episode`."""

from __future__ import annotations

from forge_agent.types import Status, Trajectory


class Stop(Exception):
    """Ends the episode: `status` for every seat (or only `seat`'s, the rest keep theirs). A
    policy failure (`status.is_policy_failure`) scores `reward`, the env's failure reward."""

    def __init__(
        self, status: Status, error: str | None = None, seat: str | None = None, reward: float = 0.0
    ):
        super().__init__(error or status.value)
        self.status, self.error, self.seat, self.reward = status, error, seat, reward


def add_turn_reward(traj: Trajectory, turn: int, value: float) -> None:
    while len(traj.turn_rewards) <= turn:
        traj.turn_rewards.append(0.0)
    traj.turn_rewards[turn] += value


def status_of(exc: BaseException) -> Status:
    status = getattr(exc, "status", None)
    return status if isinstance(status, Status) else Status.ENV_ERROR


def cap_unfinished(traj: Trajectory, failure_reward: float) -> None:
    """A one-seat episode cut by the rollout's limits (`truncated_length` / `truncated_turns`,
    after at least one turn) scores no more than the env's failure reward: leaving a task
    unfinished never pays more than failing it (docs/rewards.md). A game whose moves pay as
    they come (a Gymnasium return, -1 a step) would otherwise pay an episode cut before its
    first move 0, above any played one. The difference is an `unfinished` reward component at
    the last turn; `info["unfinished"]` keeps what it had earned."""
    if traj.status not in (Status.TRUNCATED_LENGTH, Status.TRUNCATED_TURNS) or not traj.turn_spans:
        return
    earned = sum(traj.reward_components.values())
    if earned <= failure_reward:
        return
    cut = failure_reward - earned
    traj.reward_components["unfinished"] = traj.reward_components.get("unfinished", 0.0) + cut
    add_turn_reward(traj, len(traj.turn_spans) - 1, cut)
    traj.info["unfinished"] = {"earned": earned, "scored": failure_reward}

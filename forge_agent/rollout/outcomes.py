"""How an episode ends: a stop (a status for every seat or for one), a forfeit that loses a game,
and whose failure a step that raised is (`forge_agent.env.protocol.step_failure`)."""

from __future__ import annotations

from typing import Any, NoReturn

from forge_agent.env.protocol import step_failure
from forge_agent.rollout.game import Seat
from forge_agent.types import SeatStart, Status, Trajectory


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


def lose_by_forfeit(
    seats: dict[str, Seat],
    loser: Seat,
    cut: Status,
    reward: float,
    start: SeatStart,
    totals: dict[str, float],
) -> None:
    """`loser` left the game unfinished (`cut`: its move ran out of tokens, or its turns):
    it scores `reward` (`rollout.forfeit_reward`) and ends `forfeit`; in a zero-sum game the
    other seats share `-reward`. The game is over: the others end `ok`. Each score is a
    `forfeit` reward component at the seat's last move, so the loser's trajectory is trained
    on instead of masked as a truncated one (a cut game scored 0 beats a lost one's -1)."""
    others = [name for name in seats if name != loser.name]
    scores = {loser.name: reward}
    if start.zero_sum and others:
        scores.update({name: -reward / len(others) for name in others})
    for name, value in scores.items():
        totals[name] += value
        traj = seats[name].traj
        if traj is None:
            continue
        traj.reward_components["forfeit"] = traj.reward_components.get("forfeit", 0.0) + value
        add_turn_reward(traj, max(len(traj.turn_spans) - 1, 0), value)
    for seat in seats.values():
        if seat.traj is not None:
            seat.traj.status = Status.FORFEIT if seat is loser else Status.OK
            seat.traj.info["forfeit"] = {"seat": loser.name, "cut": cut.value}
            seat.traj.info["outcome"] = f"{loser.name} forfeits ({cut.value})"
            seat.traj.info["seat_rewards"] = dict(totals)


def forfeit_reward(cfg: Any, env: Any) -> float | None:
    """What a seat that leaves its game unfinished scores (`rollout.forfeit_reward`, else the
    env's `failure_reward`); None with `rollout.forfeit: false` (the game ends truncated)."""
    if not cfg.forfeit:
        return None
    if cfg.forfeit_reward is not None:
        return cfg.forfeit_reward
    return float(getattr(env, "failure_reward", 0.0))


def step_failed(
    seats: dict[str, Seat],
    seat: Seat,
    exc: Exception,
    env: Any,
    start: SeatStart,
    totals: dict[str, float],
    solo: bool,
) -> NoReturn:
    """The env's step on `seat`'s move raised `exc`. On a policy seat's move that is the
    policy's failure (`step_failure`): the seat scores the env's failure reward, and in a game
    of several seats loses it as by forfeit (the others win it in a zero-sum game); on another
    player's move, or for an `InfraError`, the episode is infra for every seat."""
    status, reward = step_failure(exc, env)
    if seat.traj is None or not status.is_policy_failure:
        infra = status if status.is_infra_failure else Status.ENV_ERROR
        where = "step" if solo else f"step of seat {seat.name!r}"
        raise Stop(infra, f"{where}: {exc}") from exc
    if not solo:
        lose_by_forfeit(seats, seat, status, reward, start, totals)
    raise Stop(status, f"step: {exc}", seat=seat.name, reward=reward) from exc


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

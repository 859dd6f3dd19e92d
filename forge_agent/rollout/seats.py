"""Multi-seat episodes: players take turns in one env; one trajectory per policy seat.

One episode of a `SeatEnv` (`forge_agent.env.SeatEnv`):

    start = env.reset(task, seed)                   # each seat's messages + tools; whose turn
    per policy seat: render its own prompt ids      # its own token history, as in a 1-seat episode
    loop: seat = the seat whose turn it is
          policy seat: bridge the messages it received since its last move (append-only; a
                       full re-render starts a new segment) -> generate -> parse
          other seat:  its player answers the seat's messages (snapshot, scripted, endpoint)
          env.step(move) -> new messages per seat, next turn, rewards per seat
    -> one Trajectory per policy seat that moved (`info["seat"]`, `info["episode_id"]`,
       `info["players"]`; a seat the game ended before its first move has nothing to train)

Consumes: a task, a seed and the engine's generate function, env source and limits.
Produces: the policy seats' trajectories. Waits on: the generator, the env, the opponents.
An env or opponent failure ends every seat's trajectory with that status (infra failures
leave the baselines); `max_turns` counts each seat's own moves. A policy seat whose move runs
out of tokens, or a seat to move with its turns spent, loses the game by forfeit (`forfeit`,
scored with `rollout.forfeit_reward` or the env's `failure_reward`, and trained on), or with
`rollout.forfeit: false` ends the episode truncated. A move that makes the env's step raise
is the moving seat's failure (`policy_error`): it loses the game the same way.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NoReturn

from forge_agent.env.protocol import step_failure
from forge_agent.rollout.engine import START_STATE
from forge_agent.rollout.players import Player
from forge_agent.types import Message, SeatStart, SeatStep, Status, ToolSpec, Trajectory


@dataclass
class _Seat:
    """One seat's side of the episode."""

    name: str
    player: Player | None  # None: the policy
    traj: Trajectory | None = None  # policy seats only
    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    context: list[int] = field(default_factory=list)  # the current segment's ids
    last_completion: list[int] | None = None
    pending: list[Message] = field(default_factory=list)  # received since its last move
    turns: int = 0
    version: int | None = None  # a snapshot player's version for this episode


class _Stop(Exception):
    """Ends the episode: `status` for every seat (or only `seat`'s, the rest keep theirs). A
    policy failure (`status.is_policy_failure`) scores `reward`, the env's failure reward."""

    def __init__(
        self,
        status: Status,
        error: str | None = None,
        seat: str | None = None,
        reward: float = 0.0,
    ):
        super().__init__(error or status.value)
        self.status, self.error, self.seat, self.reward = status, error, seat, reward


async def run_seated_episode(
    engine: Any,
    players: dict[str, Player | None],
    task: dict[str, Any],
    seed: int | None,
    group_id: str,
    sampling_seed: int | None = None,
) -> list[Trajectory]:
    """One episode of a seated env; the trajectories of its policy seats (in seat order)."""
    async with engine._slots:
        episode_id = uuid.uuid4().hex[:10]
        labels = {s: "policy" if p is None else p.label for s, p in players.items()}
        seats = {s: _Seat(s, p) for s, p in players.items()}
        for seat in seats.values():
            if seat.player is None:
                seat.traj = Trajectory(task_id=str(task.get("task_id", "task")), group_id=group_id)
                seat.traj.info.update(seat=seat.name, episode_id=episode_id, players=labels)
                seat.traj.adapter = _seat_adapter(engine.adapter_field, seat.name, task)
        trajs = [s.traj for s in seats.values() if s.traj is not None]
        started = time.monotonic()
        try:
            env = await engine.envs.acquire()
        except Exception as exc:
            return [engine._finish(t, _status(exc), f"env start: {exc}", started) for t in trajs]
        try:
            await _play(engine, env, seats, task, seed, sampling_seed)
        except _Stop as stop:
            for s in seats.values():
                if s.traj is None or (stop.seat is not None and stop.seat != s.name):
                    continue
                if stop.status.is_policy_failure:
                    s.traj.fail_by_policy(stop.status, stop.error or "", stop.reward)
                    continue
                s.traj.status = stop.status
                if stop.error:
                    s.traj.info["error"] = stop.error
        finally:
            try:
                await env.close()
            except Exception as exc:
                for t in trajs:
                    t.info.setdefault("close_error", str(exc))
        for s in seats.values():
            if s.traj is not None:
                _trim(s.traj)
        # a seat the game ended before it moved (the opponent forfeited) has nothing to train
        moved = [t for t in trajs if t.turn_spans or t.status.is_infra_failure]
        return [engine._finish(t, t.status, None, started) for t in moved]


async def _play(
    engine: Any,
    env: Any,
    seats: dict[str, _Seat],
    task: dict[str, Any],
    seed: int | None,
    sampling_seed: int | None,
) -> None:
    cfg = engine.config
    try:
        start = await env.reset(task, seed)
    except Exception as exc:
        raise _Stop(_status(exc), f"reset: {exc}") from exc
    if not isinstance(start, SeatStart):
        raise _Stop(
            Status.ENV_ERROR,
            "reset: env.seats is set but the env is a one-seat env "
            f"(reset returned {type(start).__name__}, not SeatStart)",
        )
    if set(start.seats) != set(seats):
        raise _Stop(
            Status.ENV_ERROR,
            f"reset: the env's seats {sorted(start.seats)} are not "
            f"the seats given players {sorted(seats)}",
        )
    limit = min(cfg.max_total_tokens, engine.max_model_len or cfg.max_total_tokens)
    for name, (messages, tools) in start.seats.items():
        seat = seats[name]
        seat.messages, seat.tools = list(messages), list(tools)
        if seat.player is not None and hasattr(seat.player, "choose"):
            try:
                seat.version = await seat.player.choose()
            except Exception as exc:
                raise _Stop(_status(exc), f"seat {name!r}: {exc}") from exc
        if seat.traj is not None:  # its prompt is rendered at its first move
            seat.traj.messages = seat.messages
            seat.traj.info["tools_offered"] = len(seat.tools)
            seat.traj.status = Status.TRUNCATED_TURNS
            seat.traj.turn_states = [START_STATE]
    totals = {name: 0.0 for name in seats}
    turn: str | None = start.turn
    for _ in range(cfg.max_turns * len(seats) + 1):  # the last: a seat with its turns spent
        if turn not in seats:
            raise _Stop(
                Status.ENV_ERROR,
                f"the env gave the turn to seat {turn!r}, which it "
                f"did not declare (seats: {sorted(seats)})",
            )
        seat = seats[turn]
        forfeit = _forfeit_reward(cfg, env)
        if seat.turns >= cfg.max_turns:
            if forfeit is not None:
                _forfeit(seats, seat, Status.TRUNCATED_TURNS, forfeit, start, totals)
            return  # else every seat stays truncated_turns
        if seat.traj is not None:
            try:
                move = await _policy_move(engine, seat, limit, sampling_seed)
            except _Stop as stop:
                if stop.status != Status.TRUNCATED_LENGTH or forfeit is None:
                    raise
                _forfeit(seats, seat, stop.status, forfeit, start, totals)
                return
        else:
            seat.messages.extend(seat.pending)
            seat.pending = []
            try:
                if seat.version is not None:
                    move = await seat.player.act(seat.messages, seat.tools, version=seat.version)
                else:
                    move = await seat.player.act(seat.messages, seat.tools)
            except Exception as exc:  # a policy failure here (its messages overflow an
                # endpoint opponent's context) loses the game for the policy's seats
                reward = float(getattr(env, "failure_reward", 0.0))
                raise _Stop(_status(exc), f"seat {turn!r}: {exc}", reward=reward) from exc
            seat.messages.append(move)
        seat.turns += 1
        t0 = time.monotonic()
        try:
            step = await env.step(move)
        except Exception as exc:
            _step_failed(seats, seat, exc, env, start, totals)
        finally:
            if seat.traj is not None:
                seat.traj.timings["env_s"] = seat.traj.timings.get("env_s", 0.0) + (
                    time.monotonic() - t0
                )
        if not isinstance(step, SeatStep):
            raise _Stop(Status.ENV_ERROR, f"step returned {type(step).__name__}, not SeatStep")
        _record(engine, seats, seat, step, totals)
        if step.done:
            for s in seats.values():
                if s.traj is not None:
                    s.traj.status = Status.OK
                    s.traj.info["seat_rewards"] = dict(totals)
            if start.zero_sum and abs(sum(totals.values())) > 1e-6:
                for s in seats.values():
                    if s.traj is not None:
                        s.traj.info["zero_sum_error"] = dict(totals)
            return
        turn = step.turn


async def _policy_move(engine: Any, seat: _Seat, limit: int, sampling_seed: int | None) -> Message:
    """The policy's move for `seat`: bridge what the seat received, generate, parse."""
    traj = seat.traj
    assert traj is not None
    if seat.last_completion is None:  # its first move: a full render of all it has seen
        seat.messages.extend(seat.pending)
        seat.pending = []
        try:
            seat.context = engine.renderer.render_prompt(seat.messages, seat.tools)
        except Exception as exc:
            raise _Stop(Status.ENV_ERROR, f"render: {exc!r}") from exc
        engine._append(traj, seat.context, sampled=False)
        if len(seat.context) >= limit:
            error = f"seat {seat.name!r}: prompt of {len(seat.context)} tokens >= budget of {limit}"
            raise _Stop(Status.PROMPT_TOO_LONG, error, seat=seat.name)
    else:  # bridge what it received since its last move
        new = seat.pending
        seat.messages.extend(new)
        seat.pending = []
        bridged = None
        if new:
            try:
                bridged = engine.renderer.bridge(
                    seat.context, seat.last_completion, new, seat.tools
                )
            except Exception as exc:
                traj.info["bridge_error"] = repr(exc)[:300]
        if bridged is not None:
            engine._append(traj, bridged[len(seat.context) + len(seat.last_completion) :], False)
            seat.context = bridged
        else:  # full re-render: a new training segment
            engine.stats["bridge_fallbacks"] += 1
            traj.info["bridge_fallbacks"] = traj.info.get("bridge_fallbacks", 0) + 1
            try:
                seat.context = engine.renderer.render_prompt(seat.messages, seat.tools)
            except Exception as exc:
                raise _Stop(Status.ENV_ERROR, f"render: {exc!r}") from exc
            traj.segment_starts.append(len(traj.token_ids))
            engine._append(traj, seat.context, sampled=False)
    budget = limit - len(seat.context)
    if budget <= 0:
        raise _Stop(Status.TRUNCATED_LENGTH, None, seat=seat.name)
    turn = seat.turns
    sampling = engine.turn_sampling(traj, budget, turn, sampling_seed)
    session = f"{traj.group_id}-{traj.info['episode_id']}-{seat.name}"
    t0 = time.monotonic()
    try:
        completion = await engine.generate(list(seat.context), sampling, session)
    except Exception as exc:
        raise _Stop(Status.GENERATOR_ERROR, f"generate: {exc}") from exc
    finally:
        traj.timings["generate_s"] = traj.timings.get("generate_s", 0.0) + time.monotonic() - t0
    if completion.finish_reason == "abort":
        raise _Stop(Status.GENERATOR_ERROR, "request aborted")
    start = len(traj.token_ids)
    engine._append(traj, completion.token_ids, sampled=True, completion=completion)
    traj.turn_spans.append((start, len(traj.token_ids)))
    move = engine.renderer.parse(
        completion.token_ids, seat.tools, seat.context, call_prefix=f"call_{turn}"
    )
    seat.messages.append(move)
    seat.last_completion = list(completion.token_ids)
    if completion.finish_reason == "length":
        raise _Stop(Status.TRUNCATED_LENGTH, None, seat=seat.name)
    return move


def _record(
    engine: Any, seats: dict[str, _Seat], mover: _Seat, step: SeatStep, totals: dict[str, float]
) -> None:
    """A step's messages and rewards to their seats; a reward counts at the receiving seat's
    last move. Unknown seats are an env error."""
    unknown = sorted((set(step.messages) | set(step.rewards)) - set(seats))
    if unknown:
        raise _Stop(
            Status.ENV_ERROR,
            f"the env sent messages or rewards to seat(s) {unknown}, "
            f"which it did not declare (seats: {sorted(seats)})",
        )
    for name, messages in step.messages.items():
        seats[name].pending.extend(engine._cut(m) for m in messages)
    info = dict(step.info)
    state_key = info.pop("state_key", None)
    tool_calls = int(info.pop("tool_calls", 0) or 0)
    tool_errors = int(info.pop("tool_errors", 0) or 0)
    if mover.traj is not None:
        mover.traj.turn_states.append(None if state_key is None else str(state_key))
        mover.traj.tool_call_count += tool_calls
        mover.traj.tool_error_count += tool_errors
    for name, rewards in step.rewards.items():
        seat = seats[name]
        value = sum(float(v) for v in rewards.values())
        totals[name] += value
        if seat.traj is None:
            continue
        for key, v in rewards.items():
            seat.traj.reward_components[key] = seat.traj.reward_components.get(key, 0.0) + float(v)
        turn = max(seat.turns - 1, 0)
        while len(seat.traj.turn_rewards) <= turn:
            seat.traj.turn_rewards.append(0.0)
        seat.traj.turn_rewards[turn] += value
    for s in seats.values():
        if s.traj is not None:
            s.traj.info.update(info)


def _forfeit(
    seats: dict[str, _Seat],
    loser: _Seat,
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
        turn = max(len(traj.turn_spans) - 1, 0)
        while len(traj.turn_rewards) <= turn:
            traj.turn_rewards.append(0.0)
        traj.turn_rewards[turn] += value
    for seat in seats.values():
        if seat.traj is not None:
            seat.traj.status = Status.FORFEIT if seat is loser else Status.OK
            seat.traj.info["forfeit"] = {"seat": loser.name, "cut": cut.value}
            seat.traj.info["outcome"] = f"{loser.name} forfeits ({cut.value})"
            seat.traj.info["seat_rewards"] = dict(totals)


def _forfeit_reward(cfg: Any, env: Any) -> float | None:
    """What a seat that leaves its game unfinished scores (`rollout.forfeit_reward`, else the
    env's `failure_reward`); None with `rollout.forfeit: false` (the game ends truncated)."""
    if not cfg.forfeit:
        return None
    if cfg.forfeit_reward is not None:
        return cfg.forfeit_reward
    return float(getattr(env, "failure_reward", 0.0))


def _step_failed(
    seats: dict[str, _Seat],
    seat: _Seat,
    exc: Exception,
    env: Any,
    start: SeatStart,
    totals: dict[str, float],
) -> NoReturn:
    """The env's step on `seat`'s move raised `exc`. On a policy seat's move that is the
    policy's failure (`step_failure`): the seat loses the game as by forfeit, scoring the env's
    failure reward (the others win it in a zero-sum game); on another player's move, or for an
    `InfraError`, the episode is infra for every seat."""
    status, reward = step_failure(exc, env)
    if seat.traj is None or not status.is_policy_failure:
        infra = status if status.is_infra_failure else Status.ENV_ERROR
        raise _Stop(infra, f"step of seat {seat.name!r}: {exc}") from exc
    _forfeit(seats, seat, status, reward, start, totals)
    raise _Stop(status, f"step: {exc}", seat=seat.name, reward=reward) from exc


def _trim(traj: Trajectory) -> None:
    turns = len(traj.turn_spans)
    traj.turn_states = traj.turn_states[:turns]
    traj.turn_rewards = (traj.turn_rewards + [0.0] * turns)[:turns]


def _status(exc: BaseException) -> Status:
    status = getattr(exc, "status", None)
    return status if isinstance(status, Status) else Status.ENV_ERROR


def _seat_adapter(route: str | None, seat: str, task: dict[str, Any]) -> str | None:
    """The LoRA adapter a policy seat plays (`trainer.lora.route`): "seat" gives each seat the
    adapter of its name (one adapter per player), a task field the adapter it names, None the
    policy's only one."""
    if route is None:
        return None
    return seat if route == "seat" else task.get(route)

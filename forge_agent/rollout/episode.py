"""The episode loop, written once: seats take turns in one env; a single-agent episode is a
game with one seat (`SoloGame`).

One episode:

    start = env.reset(task, seed)                    # each seat's messages + tools; whose turn
    loop: seat = the seat whose turn it is
          policy seat: its token history receives what the seat was sent since its last move
                       (bridged append-only; a full render, or a compaction by the context
                       strategy, starts a new segment) -> generate -> parse
          other seat:  its player answers the seat's messages (snapshot, scripted, endpoint)
          env.step(move) -> new messages per seat, next turn, rewards per seat
    -> each policy seat's Trajectory (token ids, loss mask, sampler logprobs, versions,
       segments, turn spans, rewards, status)

Consumes: a task, a seed, the generate function, the renderer and the limits (`EpisodeContext`).
Produces: the policy seats' trajectories, filled in place. Waits on: the generator, the env, the
opponents. Failures end the episode as a `Status` and never raise: an env or opponent failure
ends every seat with it (infra failures leave the baselines); a move that makes the env's step
raise is the mover's failure (`policy_error`, `step_failure` decides); in a game of several
seats, a policy seat whose move runs out of tokens, or a seat to move with its `max_turns`
spent, loses by forfeit (`rollout.forfeit_reward` or the env's `failure_reward`, trained on),
or with `rollout.forfeit: false` ends the episode truncated. A one-seat episode ends
`truncated_length` / `truncated_turns` instead.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from forge_agent.generator.config import SamplingConfig
from forge_agent.rollout.context import compact
from forge_agent.rollout.game import SOLO, START_STATE, EpisodeContext, Seat, SoloGame
from forge_agent.rollout.outcomes import (
    Stop,
    add_turn_reward,
    cap_unfinished,
    forfeit_reward,
    lose_by_forfeit,
    status_of,
    step_failed,
)
from forge_agent.rollout.renderer import ChatRenderer, clean_text
from forge_agent.types import Message, SeatStart, SeatStep, Status, Trajectory


async def play(
    ctx: EpisodeContext,
    env: Any,
    seats: dict[str, Seat],
    task: dict[str, Any],
    seed: int | None,
    sampling_seed: int | None = None,
) -> None:
    """One episode of `env` (a game; wrap a one-seat env in `SoloGame`); fills the policy
    seats' trajectories in place and never raises for env, tool or generator failures."""
    episode = uuid.uuid4().hex[:8]
    for seat in seats.values():
        if seat.traj is not None:
            seat.traj.timings.setdefault("env_s", 0.0)
            seat.traj.timings.setdefault("generate_s", 0.0)
            seat.session = f"{seat.traj.group_id}-{episode}-{seat.name}"
    try:
        await _play(ctx, env, seats, task, seed, sampling_seed)
    except Stop as stop:
        for s in seats.values():
            if s.traj is None or (stop.seat is not None and stop.seat != s.name):
                continue
            if stop.status.is_policy_failure:
                s.traj.fail_by_policy(stop.status, stop.error or "", stop.reward)
                continue
            s.traj.status = stop.status
            if stop.error:
                s.traj.info["error"] = stop.error
    for s in seats.values():
        if s.traj is not None:
            turns = len(s.traj.turn_spans)  # per-turn lists end with the last turn sampled
            s.traj.turn_states = s.traj.turn_states[:turns]
            s.traj.turn_rewards = (s.traj.turn_rewards + [0.0] * turns)[:turns]
            if isinstance(env, SoloGame):
                cap_unfinished(s.traj, env.failure_reward)


async def _play(
    ctx: EpisodeContext,
    env: Any,
    seats: dict[str, Seat],
    task: dict[str, Any],
    seed: int | None,
    sampling_seed: int | None,
) -> None:
    cfg = ctx.config
    start = await _reset(env, seats, task, seed)
    for name, (messages, tools) in start.seats.items():
        seat = seats[name]
        seat.see(list(messages))
        seat.tools = list(tools)
        if seat.player is not None and hasattr(seat.player, "choose"):
            try:
                seat.version = await seat.player.choose()
            except Exception as exc:
                raise Stop(status_of(exc), f"seat {name!r}: {exc}") from exc
        if seat.traj is not None:  # its prompt is rendered at its first move
            seat.traj.info["tools_offered"] = len(seat.tools)
            seat.traj.status = Status.TRUNCATED_TURNS
            seat.traj.turn_states = [START_STATE]
    solo = isinstance(env, SoloGame)  # a one-seat env: no forfeits, no seat names
    totals = {name: 0.0 for name in seats}
    turn: str | None = start.turn
    for _ in range(cfg.max_turns * len(seats) + 1):  # the last: a seat with its turns spent
        if turn not in seats:
            raise Stop(
                Status.ENV_ERROR,
                f"the env gave the turn to seat {turn!r}, which it "
                f"did not declare (seats: {sorted(seats)})",
            )
        seat = seats[turn]
        forfeit = None if solo else forfeit_reward(cfg, env)
        if seat.turns >= cfg.max_turns:
            if forfeit is not None:
                lose_by_forfeit(seats, seat, Status.TRUNCATED_TURNS, forfeit, start, totals)
                return
            for s in seats.values():  # cut by turns: each sees what it was last sent
                if s.traj is not None and s.pending and s.turns:
                    await _receive(ctx, s)
            return  # every seat stays truncated_turns
        try:
            move = await _move(ctx, seat, sampling_seed, env)
        except Stop as stop:
            if stop.status != Status.TRUNCATED_LENGTH or forfeit is None:
                raise
            lose_by_forfeit(seats, seat, stop.status, forfeit, start, totals)
            return
        seat.turns += 1
        t0 = time.monotonic()
        try:
            step = await env.step(move)
        except Exception as exc:
            step_failed(seats, seat, exc, env, start, totals, solo)
        finally:
            if seat.traj is not None:
                seat.traj.timings["env_s"] += time.monotonic() - t0
        if not isinstance(step, SeatStep):
            raise Stop(Status.ENV_ERROR, f"step returned {type(step).__name__}, not SeatStep")
        _record(ctx, seats, seat, step, totals)
        if step.done:
            for s in seats.values():
                if s.traj is not None:
                    s.traj.status = Status.OK
                    if not solo:
                        s.traj.info["seat_rewards"] = dict(totals)
            if start.zero_sum and abs(sum(totals.values())) > 1e-6:
                for s in seats.values():
                    if s.traj is not None:
                        s.traj.info["zero_sum_error"] = dict(totals)
            return
        turn = step.turn


async def _reset(
    env: Any, seats: dict[str, Seat], task: dict[str, Any], seed: int | None
) -> SeatStart:
    t0 = time.monotonic()
    try:
        start = await env.reset(task, seed)
    except Exception as exc:
        raise Stop(status_of(exc), f"reset: {exc}") from exc
    finally:
        for seat in seats.values():
            if seat.traj is not None:
                seat.traj.timings["env_s"] += time.monotonic() - t0
    if not isinstance(start, SeatStart):
        raise Stop(
            Status.ENV_ERROR,
            "reset: env.seats is set but the env is a one-seat env "
            f"(reset returned {type(start).__name__}, not SeatStart)",
        )
    if set(start.seats) != set(seats):
        raise Stop(
            Status.ENV_ERROR,
            f"reset: the env's seats {sorted(start.seats)} are not "
            f"the seats given players {sorted(seats)}",
        )
    return start


async def _move(ctx: EpisodeContext, seat: Seat, sampling_seed: int | None, env: Any) -> Message:
    """The move of the seat whose turn it is: the policy's, or its player's."""
    if seat.traj is not None:
        return await _policy_move(ctx, seat, sampling_seed)
    seat.see(seat.pending)
    seat.pending = []
    try:
        if seat.version is not None:
            move = await seat.player.act(seat.messages, seat.tools, version=seat.version)
        else:
            move = await seat.player.act(seat.messages, seat.tools)
    except Exception as exc:  # a policy failure here (its messages overflow an endpoint
        # opponent's context) loses the game for the policy's seats
        reward = float(getattr(env, "failure_reward", 0.0))
        raise Stop(status_of(exc), f"seat {seat.name!r}: {exc}", reward=reward) from exc
    seat.messages.append(move)
    return move


async def _policy_move(ctx: EpisodeContext, seat: Seat, sampling_seed: int | None) -> Message:
    """The policy's move for `seat`: its history receives what the seat was sent, then
    generate and parse."""
    traj, history = seat.traj, seat.history
    assert traj is not None and history is not None
    if not traj.turn_spans:  # its first move: a full render
        seat.see(seat.pending)
        seat.pending = []
        try:
            history.start_segment(ctx.renderer.render_prompt(seat.messages, seat.tools))
        except Exception as exc:
            raise Stop(Status.ENV_ERROR, f"render: {exc!r}") from exc
        if len(history.prompt) >= ctx.limit:
            error = f"prompt of {len(history.prompt)} tokens >= budget of {ctx.limit}"
            if seat.name != SOLO:
                error = f"seat {seat.name!r}: {error}"
            raise Stop(Status.PROMPT_TOO_LONG, error, seat=seat.name)
    else:
        await _receive(ctx, seat)
    budget = ctx.limit - len(history.prompt)
    if budget <= 0:
        raise Stop(Status.TRUNCATED_LENGTH, None, seat=seat.name)
    turn = seat.turns
    sampling = turn_sampling(ctx.config, ctx.renderer, traj, budget, turn, sampling_seed)
    t0 = time.monotonic()
    try:
        completion = await ctx.generate(list(history.prompt), sampling, seat.session)
    except Exception as exc:
        raise Stop(Status.GENERATOR_ERROR, f"generate: {exc}") from exc
    finally:
        elapsed = time.monotonic() - t0
        traj.timings["generate_s"] += elapsed
        ctx.stats["generate_s"] = ctx.stats.get("generate_s", 0.0) + elapsed
    if completion.finish_reason == "abort":
        raise Stop(Status.GENERATOR_ERROR, "request aborted")
    prompt = history.prompt
    history.record_turn(completion.token_ids, completion.logprobs, completion.token_versions())
    try:  # parse never raises by contract; a bug there must not end the run
        move = ctx.renderer.parse(
            completion.token_ids, seat.tools, prompt, call_prefix=f"call_{turn}"
        )
    except Exception as exc:
        raise Stop(Status.ENV_ERROR, f"parse: {exc!r}") from exc
    seat.see([move])
    if completion.finish_reason == "length":
        raise Stop(Status.TRUNCATED_LENGTH, None, seat=seat.name)
    return move


async def _receive(ctx: EpisodeContext, seat: Seat) -> None:
    """`seat`'s history receives the messages it was sent since its last move: bridged
    append-only, or (the renderer cannot, or the prompt would pass the context budget and a
    strategy is set) a full render of what it sees as a new segment."""
    traj, history = seat.traj, seat.history
    assert traj is not None and history is not None
    new, seat.pending = seat.pending, []
    seat.see(new)
    try:
        bridged = history.bridge(ctx.renderer, new, seat.tools)
    except Exception as exc:  # fall back to a full render, noted
        traj.info["bridge_error"] = repr(exc)[:300]
        bridged = None
    over = ctx.compactor is not None and (bridged is None or len(bridged) > ctx.context_budget)
    if bridged is not None and not over:
        history.extend_to(bridged)
        return
    try:
        if over:
            await _compact(ctx, seat)
        prompt = ctx.renderer.render_prompt(seat.messages, seat.tools)
    except Stop:
        raise
    except Exception as exc:
        raise Stop(Status.ENV_ERROR, f"render: {exc!r}") from exc
    if bridged is None:
        ctx.stats["bridge_fallbacks"] = ctx.stats.get("bridge_fallbacks", 0) + 1
        traj.info["bridge_fallbacks"] = traj.info.get("bridge_fallbacks", 0) + 1
    history.start_segment(prompt)


async def _compact(ctx: EpisodeContext, seat: Seat) -> None:
    """Rewrite what `seat` sees with the context strategy when its prompt is over budget."""
    traj = seat.traj
    assert traj is not None and ctx.compactor is not None

    def count(messages: list[Message]) -> int:
        return len(ctx.renderer.render_prompt(messages, seat.tools))

    if count(seat.messages) <= ctx.context_budget:
        return
    try:
        view = await compact(ctx.compactor, seat.messages, seat.tools, ctx.context_budget, count)
    except Exception as exc:  # a user's strategy failing is the run's setup, not the policy
        raise Stop(Status.ENV_ERROR, f"rollout.context.strategy: {exc!r}") from exc
    if traj.messages is seat.messages:  # the transcript keeps every message
        traj.messages = list(seat.messages)
    seat.messages = view
    traj.info["context_rewrites"] = traj.info.get("context_rewrites", 0) + 1


def turn_sampling(
    cfg: Any,
    renderer: ChatRenderer,
    traj: Trajectory,
    budget: int,
    turn: int,
    sampling_seed: int | None,
) -> SamplingConfig:
    """The sampling of `traj`'s turn `turn`: at most `budget` new tokens (and the per-turn
    cap), the run's temperature and top-p, the renderer's stop tokens, a per-turn seed when
    `sampling_seed` is set, and the trajectory's LoRA adapter."""
    return SamplingConfig(
        max_tokens=min(cfg.max_new_tokens_per_turn, budget),
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        stop_token_ids=renderer.stop_token_ids,
        seed=None if sampling_seed is None else sampling_seed + turn,
        adapter=traj.adapter,
    )


def cut_message(renderer: ChatRenderer, message: Message, max_tokens: int) -> Message:
    """An env message made safe to render: text fields without lone surrogates, content cut
    to `max_tokens` (by characters if the tokenizer still refuses it)."""
    message = {k: clean_text(v) if isinstance(v, str) else v for k, v in message.items()}
    content = message.get("content")
    if not isinstance(content, str):
        return message
    try:
        cut = renderer.truncate_text(content, max_tokens)
    except Exception:
        keep = 4 * max_tokens
        cut = content if len(content) <= keep else content[:keep] + "\n...[truncated]"
    return {**message, "content": cut}


def _record(
    ctx: EpisodeContext, seats: dict[str, Seat], mover: Seat, step: SeatStep, totals: dict
) -> None:
    """A step's messages and rewards to their seats; a reward counts at the receiving seat's
    last move. Unknown seats are an env error."""
    unknown = sorted((set(step.messages) | set(step.rewards)) - set(seats))
    if unknown:
        raise Stop(
            Status.ENV_ERROR,
            f"the env sent messages or rewards to seat(s) {unknown}, "
            f"which it did not declare (seats: {sorted(seats)})",
        )
    limit = ctx.config.tool_output_tokens
    for name, messages in step.messages.items():
        seats[name].pending.extend(cut_message(ctx.renderer, m, limit) for m in messages)
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
        add_turn_reward(seat.traj, max(seat.turns - 1, 0), value)
    for s in seats.values():
        if s.traj is not None:
            s.traj.info.update(info)

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
from dataclasses import dataclass, field
from typing import Any, NoReturn

from forge_agent.env.protocol import step_failure
from forge_agent.generator.config import SamplingConfig
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.context import compact
from forge_agent.rollout.game import SOLO, START_STATE, EpisodeContext, Seat, SoloGame
from forge_agent.rollout.outcomes import Stop, add_turn_reward, cap_unfinished, status_of
from forge_agent.rollout.renderer import ChatRenderer, clean_text
from forge_agent.types import Message, SeatStart, SeatStep, Status, Trajectory


@dataclass
class Episode:
    """One episode's state, owned in one place: its game (a one-seat env wrapped in
    `SoloGame`), its seats, how it started, and each seat's running total. The ways an episode
    ends are its methods: `lose_by_forfeit`, `step_failed`, and a `Stop` applied by `play`.

        await Episode(ctx, game, seats).play(task, seed, sampling_seed)
    """

    ctx: EpisodeContext
    game: Any
    seats: dict[str, Seat]
    start: SeatStart | None = None
    totals: dict[str, float] = field(init=False)
    stopped: Stop | None = field(init=False, default=None)  # what ended it early, if anything

    def __post_init__(self) -> None:
        self.totals = {name: 0.0 for name in self.seats}

    @property
    def solo(self) -> bool:
        """A one-seat env's episode: no forfeits, no seat names in its messages."""
        return isinstance(self.game, SoloGame)

    @property
    def policy_seats(self) -> list[Seat]:
        return [s for s in self.seats.values() if s.traj is not None]

    # ------------------------------------------------------------------ the loop
    async def play(
        self, task: dict[str, Any], seed: int | None, sampling_seed: int | None = None
    ) -> None:
        """Play the episode; fills the policy seats' trajectories in place and never raises
        for env, tool or generator failures."""
        episode = uuid.uuid4().hex[:8]
        for seat in self.policy_seats:
            seat.traj.timings.setdefault("env_s", 0.0)
            seat.traj.timings.setdefault("generate_s", 0.0)
            seat.session = f"{seat.traj.group_id}-{episode}-{seat.name}"
        try:
            await self._turns(task, seed, sampling_seed)
        except Stop as stop:
            self.stopped = stop
            self._stopped(stop)
        for seat in self.policy_seats:
            traj = seat.traj
            turns = len(traj.turn_spans)  # per-turn lists end with the last turn sampled
            traj.turn_states = traj.turn_states[:turns]
            traj.turn_rewards = (traj.turn_rewards + [0.0] * turns)[:turns]
            if self.solo:
                cap_unfinished(traj, self.game.failure_reward)

    async def _turns(
        self, task: dict[str, Any], seed: int | None, sampling_seed: int | None
    ) -> None:
        cfg, seats = self.ctx.config, self.seats
        await self._reset(task, seed)
        turn: str | None = self.start.turn
        for _ in range(cfg.max_turns * len(seats) + 1):  # the last: a seat with its turns spent
            if turn not in seats:
                raise Stop(
                    Status.ENV_ERROR,
                    f"the env gave the turn to seat {turn!r}, which it "
                    f"did not declare (seats: {sorted(seats)})",
                )
            seat = seats[turn]
            forfeit = None if self.solo else self.forfeit_reward()
            if seat.turns >= cfg.max_turns:
                if forfeit is not None:
                    self.lose_by_forfeit(seat, Status.TRUNCATED_TURNS, forfeit)
                    return
                for s in self.policy_seats:  # cut by turns: each sees what it was last sent
                    if s.pending and s.turns:
                        await _receive(self.ctx, s)
                return  # every seat stays truncated_turns
            try:
                move = await self._move(seat, sampling_seed)
            except Stop as stop:
                if stop.status != Status.TRUNCATED_LENGTH or forfeit is None:
                    raise
                self.lose_by_forfeit(seat, stop.status, forfeit)
                return
            seat.turns += 1
            step = await self._step(seat, move)
            self._record(seat, step)
            if step.done:
                self._ended()
                return
            turn = step.turn

    async def _reset(self, task: dict[str, Any], seed: int | None) -> None:
        """Reset the game; each seat sees its opening messages and tools."""
        seats = self.seats
        t0 = time.monotonic()
        try:
            start = await self.game.reset(task, seed)
        except Exception as exc:
            raise Stop(status_of(exc), f"reset: {exc}") from exc
        finally:
            for seat in self.policy_seats:
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
        self.start = start
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

    async def _move(self, seat: Seat, sampling_seed: int | None) -> Message:
        """The move of the seat whose turn it is: the policy's, or its player's."""
        if seat.traj is not None:
            return await _policy_move(self.ctx, seat, sampling_seed)
        seat.see(seat.pending)
        seat.pending = []
        try:
            if seat.version is not None:
                move = await seat.player.act(seat.messages, seat.tools, version=seat.version)
            else:
                move = await seat.player.act(seat.messages, seat.tools)
        except Exception as exc:  # a policy failure here (its messages overflow an endpoint
            # opponent's context) loses the game for the policy's seats
            reward = float(getattr(self.game, "failure_reward", 0.0))
            raise Stop(status_of(exc), f"seat {seat.name!r}: {exc}", reward=reward) from exc
        seat.messages.append(move)
        return move

    async def _step(self, seat: Seat, move: Message) -> SeatStep:
        """The game's step on `seat`'s move, timed on the seat's trajectory."""
        t0 = time.monotonic()
        try:
            step = await self.game.step(move)
        except Exception as exc:
            self.step_failed(seat, exc)
        finally:
            if seat.traj is not None:
                seat.traj.timings["env_s"] += time.monotonic() - t0
        if not isinstance(step, SeatStep):
            raise Stop(Status.ENV_ERROR, f"step returned {type(step).__name__}, not SeatStep")
        return step

    # ------------------------------------------------------------------ how it ends
    def _ended(self) -> None:
        """The game is over: every policy seat ends `ok` with the seats' totals."""
        for seat in self.policy_seats:
            seat.traj.status = Status.OK
            if not self.solo:
                seat.traj.info["seat_rewards"] = dict(self.totals)
        if self.start.zero_sum and abs(sum(self.totals.values())) > 1e-6:
            for seat in self.policy_seats:
                seat.traj.info["zero_sum_error"] = dict(self.totals)

    def _stopped(self, stop: Stop) -> None:
        """A `Stop` ends the episode: its status for every policy seat, or only `stop.seat`'s."""
        for s in self.policy_seats:
            if stop.seat is not None and stop.seat != s.name:
                continue
            if stop.status.is_policy_failure:
                s.traj.fail_by_policy(stop.status, stop.error or "", stop.reward)
                continue
            s.traj.status = stop.status
            if stop.error:
                s.traj.info["error"] = stop.error

    def forfeit_reward(self) -> float | None:
        """What a seat that leaves its game unfinished scores (`rollout.forfeit_reward`, else
        the env's `failure_reward`); None with `rollout.forfeit: false` (it ends truncated)."""
        cfg = self.ctx.config
        if not cfg.forfeit:
            return None
        if cfg.forfeit_reward is not None:
            return cfg.forfeit_reward
        return float(getattr(self.game, "failure_reward", 0.0))

    def lose_by_forfeit(self, loser: Seat, cut: Status, reward: float) -> None:
        """`loser` left the game unfinished (`cut`: its move ran out of tokens, or its turns):
        it scores `reward` and ends `forfeit`; in a zero-sum game the other seats share
        `-reward`. The game is over: the others end `ok`. Each score is a `forfeit` reward
        component at the seat's last move, so the loser's trajectory is trained on instead of
        masked as a truncated one (a cut game scored 0 beats a lost one's -1)."""
        others = [name for name in self.seats if name != loser.name]
        scores = {loser.name: reward}
        if self.start.zero_sum and others:
            scores.update({name: -reward / len(others) for name in others})
        for name, value in scores.items():
            self.totals[name] += value
            traj = self.seats[name].traj
            if traj is None:
                continue
            components = traj.reward_components
            components["forfeit"] = components.get("forfeit", 0.0) + value
            add_turn_reward(traj, max(len(traj.turn_spans) - 1, 0), value)
        for seat in self.policy_seats:
            seat.traj.status = Status.FORFEIT if seat is loser else Status.OK
            seat.traj.info["forfeit"] = {"seat": loser.name, "cut": cut.value}
            seat.traj.info["outcome"] = f"{loser.name} forfeits ({cut.value})"
            seat.traj.info["seat_rewards"] = dict(self.totals)

    def step_failed(self, seat: Seat, exc: Exception) -> NoReturn:
        """The game's step on `seat`'s move raised `exc`. On a policy seat's move that is the
        policy's failure (`step_failure`): the seat scores the env's failure reward, and in a
        game of several seats loses it as by forfeit (the others win it in a zero-sum game);
        on another player's move, or for an `InfraError`, the episode is infra for every
        seat."""
        status, reward = step_failure(exc, self.game)
        if seat.traj is None or not status.is_policy_failure:
            infra = status if status.is_infra_failure else Status.ENV_ERROR
            where = "step" if self.solo else f"step of seat {seat.name!r}"
            raise Stop(infra, f"{where}: {exc}") from exc
        if not self.solo:
            self.lose_by_forfeit(seat, status, reward)
        raise Stop(status, f"step: {exc}", seat=seat.name, reward=reward) from exc

    def _record(self, mover: Seat, step: SeatStep) -> None:
        """A step's messages and rewards to their seats; a reward counts at the receiving
        seat's last move. Unknown seats are an env error."""
        seats, ctx = self.seats, self.ctx
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
            self.totals[name] += value
            if seat.traj is None:
                continue
            components = seat.traj.reward_components
            for key, v in rewards.items():
                components[key] = components.get(key, 0.0) + float(v)
            add_turn_reward(seat.traj, max(seat.turns - 1, 0), value)
        for s in self.policy_seats:
            s.traj.info.update(info)


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
    history = seat.history
    assert history is not None
    new, seat.pending = seat.pending, []
    seat.see(new)
    bridged = history.next_prompt(ctx.renderer, new, seat.tools)
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
    cfg: RolloutConfig,
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


def cut_message(renderer: ChatRenderer | None, message: Message, max_tokens: int) -> Message:
    """An env message made safe to render: text fields without lone surrogates, content cut
    to `max_tokens` (by characters without a renderer, in scripted play, or if the tokenizer
    still refuses it)."""
    message = {k: clean_text(v) if isinstance(v, str) else v for k, v in message.items()}
    content = message.get("content")
    if not isinstance(content, str):
        return message
    if renderer is not None:
        try:
            return {**message, "content": renderer.truncate_text(content, max_tokens)}
        except Exception:  # the tokenizer refused it: cut by characters
            pass
    keep = 4 * max_tokens
    cut = content if len(content) <= keep else content[:keep] + "\n...[truncated]"
    return {**message, "content": cut}

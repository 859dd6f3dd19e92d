"""A Gymnasium env with `Discrete` actions (FrozenLake-v1, Blackjack-v1, ...) as an agent env.

- `GymnasiumAgentEnv`: observations are rendered as text; the actions are one tool,
  `act(action)`, whose argument is an enum of the action names, so an illegal action comes back
  as a tool error message. The episode's return is the reward component `env_reward`.
- `GymnasiumIdEnv`: the env of `env.id=gymnasium:<id>`, any such id, paid move by move.

The other way round (an agent env as a `gymnasium.Env`) is `forge_agent.env.adapters.agent_gym`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import gymnasium

from forge_agent.env.demonstrations import run_sync
from forge_agent.env.protocol import ToolEnv
from forge_agent.env.sources import EnvSetupError, Split, holdout
from forge_agent.types import Message, StepResult, ToolSpec

__all__ = ["ACTION_NAMES", "DEFAULT_MAX_MOVES", "GymnasiumAgentEnv", "GymnasiumIdEnv"]

ACTION_NAMES: dict[str, list[str]] = {
    "FrozenLake-v1": ["left", "down", "right", "up"],
    "Blackjack-v1": ["stick", "hit"],
    "CliffWalking-v1": ["up", "right", "down", "left"],
    "Taxi-v3": ["south", "north", "east", "west", "pickup", "dropoff"],
    "Taxi-v4": ["south", "north", "east", "west", "pickup", "dropoff"],
}
"""Readable names of the Discrete actions of known Gymnasium envs (others get "0", "1", ...)."""

DEFAULT_MAX_MOVES = 100
"""A game's move cap without `max_moves` or a spec TimeLimit (CliffWalking-v1 has none)."""


# --------------------------------------------------------------------------------------------
# Gymnasium env -> agent env
# --------------------------------------------------------------------------------------------


def _blackjack_text(obs: Any) -> str:
    player, dealer, usable_ace = obs
    ace = " (with a usable ace)" if usable_ace else ""
    return f"Your hand sums to {player}{ace}. The dealer shows {dealer}."


OBSERVATION_RENDERERS: dict[str, Callable[[gymnasium.Env, Any], str]] = {
    "Blackjack-v1": lambda env, obs: _blackjack_text(obs),
}


def _grid_cell_text(env: gymnasium.Env, obs: Any) -> str:
    columns = int(getattr(env.unwrapped, "ncol", 0) or env.unwrapped.shape[1])
    return f"You are at row {int(obs) // columns}, column {int(obs) % columns}."


def _taxi_text(env: gymnasium.Env, obs: Any) -> str:
    row, col, passenger, destination = env.unwrapped.decode(int(obs))
    names, cells = "RGYB", env.unwrapped.locs
    where = "in the taxi" if passenger == 4 else f"at {names[passenger]} {cells[passenger]}"
    return (
        f"Taxi at ({row}, {col}). Passenger {where}. "
        f"Destination {names[destination]} {cells[destination]}."
    )


COMPACT_RENDERERS: dict[str, Callable[[gymnasium.Env, Any], str]] = {
    "FrozenLake-v1": _grid_cell_text,
    "CliffWalking-v1": _grid_cell_text,
    "Taxi-v4": _taxi_text,
    "Blackjack-v1": lambda env, obs: _blackjack_text(obs),
}
"""`observation="compact"`: one line of the game's state instead of its map (the grid games:
the player's row and column; Taxi: the taxi's cell, the passenger's and the destination's)."""


class GymnasiumAgentEnv(ToolEnv):
    """A Gymnasium env with Discrete actions, played through an `act(action)` tool.

    Args:
        gym_id: the Gymnasium id, e.g. "FrozenLake-v1".
        make_kwargs: keyword arguments for `gymnasium.make`.
        action_names: one name per action (default: `ACTION_NAMES[gym_id]` or "0".."n-1").
        render: `(gym_env, observation) -> text` (default: `OBSERVATION_RENDERERS[gym_id]`,
            else the env's "ansi" render, else `str(observation)`).
        instructions: the system prompt's description of the game.
        unfinished_reward: what an episode that ends before the game does scores (see below);
            None: the game's worst return, from its transition table. A game without a table
            (Blackjack) needs it, or leaving pays: an unplayed Blackjack hand is a lost bet, -1.
        max_moves: the game's move cap (it then ends truncated, scored its return); None:
            the spec's `max_episode_steps`, else `DEFAULT_MAX_MOVES`. Set it to
            `rollout.max_turns`, so that the rollout never cuts a game that is played.
        observation: "render" (the game's own text: `OBSERVATION_RENDERERS[gym_id]`, else its
            "ansi" render, the whole map each move) or "compact" (`COMPACT_RENDERERS[gym_id]`,
            one line: fewer tokens a move, so a cheaper warm start and longer games in the
            token cap). `render` wins over both.

    An unfinished episode (a quit, a step that raised, a rollout cut) scores `failure_reward`:
    `unfinished_reward`, else the game's worst return (its table's worst move x `max_moves`,
    capped at 0), fixed at build time (docs/envs.md, "One rule for an unfinished game").

    A task may carry `"seed"`, the game's start state (it wins over reset's seed, so every
    episode of a group starts alike). `tasks(split, n, seed)` makes such tasks: start seeds,
    split between train and eval by a hash. `state_key()` is the current observation. Rewards,
    at the end of the episode:
    `{"env_reward": return}`; info: `outcome` ("terminated" | "truncated" | "stopped" when the
    model answered without acting), `env_return`, `env_steps`.
    """

    required_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        gym_id: str,
        make_kwargs: dict[str, Any] | None = None,
        action_names: list[str] | None = None,
        render: Callable[[gymnasium.Env, Any], str] | None = None,
        instructions: str | None = None,
        unfinished_reward: float | None = None,
        max_moves: int | None = None,
        observation: Literal["render", "compact"] = "render",
    ) -> None:
        self.gym_id = gym_id
        self.unfinished_reward = unfinished_reward
        self.make_kwargs = dict(make_kwargs or {})
        self.max_moves = _move_cap(gym_id, max_moves or self.make_kwargs.get("max_episode_steps"))
        self.failure_reward = (
            float(unfinished_reward)
            if unfinished_reward is not None
            else _worst_return(gym_id, self.make_kwargs, self.max_moves)
        )
        self._action_names = action_names
        self._render = render or _renderer(gym_id, observation)
        self.instructions = instructions or f"You are playing the Gymnasium game {gym_id}."
        self.gym_env: gymnasium.Env | None = None

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """Start seeds `seed * n ... seed * n + n - 1` of the game, the `split` share of them."""
        starts = [
            {"task_id": f"{self.gym_id}-seed{s}", "seed": s}
            for s in range(seed * n, (seed + 1) * n)
        ]
        return holdout(starts, split, key=lambda task: f"{self.gym_id}:{task['seed']}")

    # -- hooks ---------------------------------------------------------------------------------

    @classmethod
    def failure_reward_of(cls, *args: Any, **kwargs: Any) -> float:
        """`cls(*args, **kwargs)`'s `failure_reward` (an env worker's, before it builds one)."""
        return cls(*args, **kwargs).failure_reward

    def make_gym_env(self, task: dict[str, Any]) -> gymnasium.Env:
        """The Gymnasium env of an episode (default: made once, reused across episodes)."""
        if self.gym_env is None:
            kwargs = {"max_episode_steps": self.max_moves, **self.make_kwargs}
            spec = gymnasium.spec(self.gym_id)
            if self._render is None and "ansi" in _render_modes(spec):
                kwargs.setdefault("render_mode", "ansi")
            self.gym_env = gymnasium.make(self.gym_id, **kwargs)
        return self.gym_env

    def render_observation(self, observation: object) -> str:
        """The observation as text for the model."""
        assert self.gym_env is not None
        if self._render is not None:
            return self._render(self.gym_env, observation)
        if self.gym_env.render_mode == "ansi":
            return str(self.gym_env.render())
        return str(observation)

    def demonstrations(
        self, n: int, seed: int, demo_fraction: float, max_turns: int | None = None
    ) -> list[dict[str, Any]]:
        """Games planned on the game's transition table, played through this env (its own
        replies), from start seeds `seed * n ...`: each move is the best-return move from where
        the game stands (`plan_values`), except that with probability `1 - demo_fraction` it is
        a random move that does not end the game (the plan goes on from there). Each game draws
        its random moves from its own start seed, so a game stopped after `max_turns` moves (the
        warm start passes one more than an episode's `rollout.max_turns`: moves past an episode
        are never trained on) is the first moves of the whole game. Each is given with its task
        (`{"messages", "tools", "task"}`: the start seed), so `--check` replays it on the same
        start. [] for a game without a deterministic table (Blackjack, slippery FrozenLake): the
        warm start then samples calls from the tool's schema."""
        return run_sync(self._play_demonstrations(n, seed, demo_fraction, max_turns))

    async def _play_demonstrations(
        self, n: int, seed: int, demo_fraction: float, max_turns: int | None
    ) -> list[dict[str, Any]]:
        import json

        convos: list[dict[str, Any]] = []
        moves = self.max_moves if max_turns is None else min(self.max_moves, max_turns)
        values = table = None  # one plan for every game: the table is the game's, not a start's
        try:
            for start in range(seed * n, seed * n + n):
                task = {"task_id": f"{self.gym_id}-seed{start}", "seed": start}
                messages, tools = await self.reset(task, start)
                if values is None:
                    table = _deterministic_table(self.gym_env)
                    values = plan_values(self.gym_env, self.max_moves)
                    if values is None:
                        break
                rng = random.Random(f"{self.gym_id}-demos-{seed}-{start}")
                convo, names = list(messages), self.action_names
                for k in range(moves):
                    state = int(self._observation)
                    move = best_move(
                        self.gym_env, values, state, k, rng, demo_fraction, table=table
                    )
                    call = {"name": "act", "arguments": json.dumps({"action": names[move]})}
                    call = {"id": f"call_{k}", "type": "function", "function": call}
                    reply = self._act(names[move])
                    convo.append({"role": "assistant", "content": "", "tool_calls": [call]})
                    convo.append(
                        {"role": "tool", "tool_call_id": call["id"], "name": "act"}
                        | {"content": reply}
                    )
                    if self.terminated or self.truncated:
                        break
                convos.append({"messages": convo, "tools": tools, "task": task})
        finally:
            await self.close()
        return convos

    def state_key(self) -> str:
        """The game's current observation (the toy-text games' whole state, e.g. FrozenLake's
        cell or Blackjack's hands), for GiGPO's step-level groups."""
        return repr(self._observation)

    def outcome(self, terminated: bool, truncated: bool) -> str:
        """The episode's outcome label."""
        return "terminated" if terminated else "truncated" if truncated else "stopped"

    @property
    def action_names(self) -> list[str]:
        assert self.gym_env is not None
        space = self.gym_env.action_space
        if not isinstance(space, gymnasium.spaces.Discrete):
            raise TypeError(f"{self.gym_id} has action space {space}; only Discrete is supported")
        names = self._action_names or ACTION_NAMES.get(self.gym_id)
        names = names or [str(i) for i in range(int(space.n))]
        if len(names) != int(space.n):
            raise ValueError(f"{self.gym_id} has {space.n} actions, got names {names}")
        return list(names)

    # -- agent env -----------------------------------------------------------------------------

    def get_tools(self) -> list[Callable[..., Any]]:
        names = self.action_names

        def act(action: str) -> str:
            """Take one action in the game and see what happens.

            Args:
                action: The action to take.
            """
            return self._act(action)

        act.__annotations__ = {"action": Literal[tuple(names)], "return": str}  # type: ignore[misc]
        return [act]

    def prompt(self, task: dict[str, Any]) -> list[Message]:
        system = (
            f"{self.instructions} Call the act tool with one of the actions: "
            f"{', '.join(self.action_names)}. Keep acting until the game is over."
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self._observation_text},
        ]

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        env = self.make_gym_env(task)
        seed = task["seed"] if task.get("seed") is not None else seed
        observation, _ = env.reset(seed=seed)
        self._observation = observation
        self._observation_text = self.render_observation(observation)
        self.env_return, self.env_steps = 0.0, 0
        self.terminated = self.truncated = False
        return await super().reset(task, seed)

    async def step(self, assistant_message: Message) -> StepResult:
        result = await super().step(assistant_message)
        if not result.done and (self.terminated or self.truncated):
            final = self.judge("")
            result = StepResult(result.messages, final[0], True, {**result.info, **final[1]})
        return result

    def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        info = {
            "outcome": self.outcome(self.terminated, self.truncated),
            "env_return": self.env_return,
            "env_steps": self.env_steps,
        }
        if self.terminated or self.truncated:
            return {"env_reward": self.env_return}, info
        scored = min(self.env_return, self.failure_reward)  # unfinished: the one rule
        return {"env_reward": scored}, {**info, "unfinished_reward": scored}

    def _act(self, action: str) -> str:
        if self.terminated or self.truncated:
            raise RuntimeError("the game is over; answer without calling act")
        assert self.gym_env is not None
        observation, reward, terminated, truncated, _ = self.gym_env.step(
            self.action_names.index(action)
        )
        self._observation = observation
        self.env_return += float(reward)
        self.env_steps += 1
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        text = f"{self.render_observation(observation)}\nReward: {float(reward):g}"
        if terminated or truncated:
            text += f"\nThe game is over ({'terminated' if terminated else 'out of time'})."
        return text

    async def close(self) -> None:
        await super().close()
        if self.gym_env is not None:
            self.gym_env.close()
            self.gym_env = None


class GymnasiumIdEnv(GymnasiumAgentEnv):
    """The env of `env.id=gymnasium:<id>` (any Gymnasium id with Discrete actions), scored as
    `GymnasiumAgentEnv` is, each `act`'s reward paid at its step (`env_reward`) for per-turn
    credit. An id Gymnasium refuses is an `EnvSetupError` naming the closest ids it knows."""

    def __init__(self, gym_id: str, **kwargs: Any) -> None:
        _check_gym_id(gym_id)
        super().__init__(gym_id, **kwargs)
        self._paid = 0.0

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        self._paid = 0.0
        return await super().reset(task, seed)

    async def step(self, assistant_message: Message) -> StepResult:
        result = await super().step(assistant_message)
        total = self.env_return  # the return so far; at the end, what `judge` scored
        if result.done:
            total = result.rewards.get("env_reward", total)
        earned, self._paid = total - self._paid, total
        return StepResult(result.messages, {"env_reward": earned}, result.done, result.info)


def _check_gym_id(gym_id: str) -> None:
    """An `EnvSetupError` naming `gym_id` and the closest ids Gymnasium knows, when
    `gymnasium.spec` refuses it (unknown, or a deprecated version such as Taxi-v3)."""
    import difflib

    try:
        gymnasium.spec(gym_id)
    except gymnasium.error.Error as exc:
        close = difflib.get_close_matches(gym_id, list(gymnasium.envs.registry), n=3, cutoff=0.6)
        known = f"; ids gymnasium knows close to it: {', '.join(close)}" if close else ""
        raise EnvSetupError(
            f"gymnasium:{gym_id}",
            "env.id",
            f"gymnasium refuses the id ({str(exc).rstrip('.')}){known}",
        ) from None


def _renderer(gym_id: str, observation: str) -> Callable[[gymnasium.Env, Any], str] | None:
    """The text renderer of `observation` ("render" or "compact") for `gym_id`; None: the
    game's own "ansi" render."""
    if observation == "render":
        return OBSERVATION_RENDERERS.get(gym_id)
    if observation != "compact":
        raise ValueError(f"observation must be 'render' or 'compact', got {observation!r}")
    if gym_id not in COMPACT_RENDERERS:
        raise ValueError(
            f"observation='compact' has no renderer for {gym_id}; it has one for "
            f"{', '.join(sorted(COMPACT_RENDERERS))} (or pass render=)"
        )
    return COMPACT_RENDERERS[gym_id]


def _move_cap(gym_id: str, max_moves: int | None) -> int:
    """`max_moves`, else the spec's `max_episode_steps`, else `DEFAULT_MAX_MOVES`."""
    if max_moves is not None:
        if int(max_moves) < 1:
            raise ValueError(f"max_moves must be a positive number of moves, got {max_moves!r}")
        return int(max_moves)
    try:
        steps = gymnasium.spec(gym_id).max_episode_steps
    except gymnasium.error.Error:
        steps = None
    return int(steps) if steps else DEFAULT_MAX_MOVES


def _worst_return(gym_id: str, make_kwargs: dict[str, Any], max_moves: int) -> float:
    """The game's worst return in `max_moves` moves: its table's smallest one-move reward times
    `max_moves`, capped at 0.0 (0.0 for a game without a table, or one that does not build)."""
    try:
        game = gymnasium.make(gym_id, **make_kwargs)
    except Exception:
        return 0.0
    try:
        table = getattr(game.unwrapped, "P", None)
        if not isinstance(table, dict):
            return 0.0
        rewards = [t[2] for moves in table.values() for outs in moves.values() for t in outs]
        return min(0.0, float(min(rewards, default=0.0)) * max_moves)
    finally:
        game.close()


def _deterministic_table(gym_env: gymnasium.Env | None) -> dict | None:
    """A toy-text game's transition table `P` when every move has one outcome, else None."""
    table = getattr(getattr(gym_env, "unwrapped", None), "P", None)
    if not isinstance(table, dict):
        return None
    if any(len(outs) != 1 for moves in table.values() for outs in moves.values()):
        return None  # stochastic (slippery FrozenLake)
    return table


def plan_values(
    gym_env: gymnasium.Env | None, horizon: int, gamma: float = 0.99
) -> list[dict[int, float]] | None:
    """Finite-horizon values of a deterministic toy-text game: `values[k][s]` is the best
    discounted return from state `s` with `k` moves left (`gamma` < 1 prefers shorter paths to
    the same return); None for a game without a deterministic table."""
    table = _deterministic_table(gym_env)
    if table is None:
        return None
    values = [dict.fromkeys(table, 0.0)]
    for _ in range(horizon):
        last = values[-1]
        values.append(
            {
                s: max(
                    r + (0.0 if done else gamma * last[s2])
                    for ((_, s2, r, done),) in moves.values()
                )
                for s, moves in table.items()
            }
        )
        if values[-1] == last:  # a fixed point: every longer horizon has these values
            values += [last] * (horizon + 1 - len(values))
            break
    return values


def best_move(
    gym_env: gymnasium.Env,
    values: list[dict[int, float]],
    state: int,
    moved: int,
    rng: random.Random,
    demo_fraction: float,
    gamma: float = 0.99,
    table: dict | None = None,
) -> int:
    """The best-return move from `state` after `moved` moves of `len(values) - 1` (a random
    move that does not end the game instead, with probability `1 - demo_fraction`). `table`:
    the game's `_deterministic_table` (looked up when None)."""
    table = table if table is not None else _deterministic_table(gym_env)
    assert table is not None
    left = values[max(0, len(values) - 2 - moved)]
    moves = table[state]
    if rng.random() >= demo_fraction:
        going_on = [a for a, ((_, _, _, done),) in moves.items() if not done]
        if going_on:
            return rng.choice(going_on)

    def worth(a: int) -> float:
        ((_, s2, r, done),) = moves[a]
        return r + (0.0 if done else gamma * left[s2])

    return max(sorted(moves), key=worth)


def _render_modes(spec: gymnasium.envs.registration.EnvSpec) -> list[str]:
    try:
        entry = spec.entry_point
        cls = (
            gymnasium.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        )
        return list(getattr(cls, "metadata", {}).get("render_modes", []))
    except Exception:
        return []

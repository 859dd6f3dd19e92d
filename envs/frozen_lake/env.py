"""FrozenLake through the Gymnasium adapter: walk from S to G on a grid without falling in a hole.

Each move is an `act` tool call ("left", "down", "right", "up"); the board is shown as text with
`A` marking the agent, followed by a line naming the walker's cell, its four neighbours and where
the goal lies (`describe_position`), optionally ending with the moves that are safe or that step
into a hole, in the action words (`move_list`). With `board="first"` the board is shown in the
first prompt only and each move's reply is a compact position line alone (a move and its reply
~75 tokens instead of ~105).
Non-slippery by default, so a correct plan always works.
Rewards at the end: `{"env_reward": 1.0}` on reaching the goal, else 0.0; info["outcome"]:
"goal" | "hole" | "out_of_time" | "stopped".
"""

from __future__ import annotations

import json
import random
from typing import Any

import gymnasium
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from forge_agent.env import Split, holdout
from forge_agent.env.adapters.gymnasium import ACTION_NAMES, GymnasiumAgentEnv
from forge_agent.env.demonstrations import run_sync
from forge_agent.types import Message, ToolSpec

__all__ = [
    "DEFAULT_MAP",
    "FrozenLakeEnv",
    "describe_position",
    "generate_tasks",
    "render_board",
    "safe_moves",
    "shortest_path",
]

ACTIONS = ACTION_NAMES["FrozenLake-v1"]
MOVES = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
"""Row and column change of each action."""

DEFAULT_MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]
"""Gymnasium's standard 4x4 map."""

INSTRUCTIONS = (
    "You walk on a frozen lake drawn as a grid: S is the start, F frozen ice, H a hole, G the "
    "goal, and A marks where you are. Row 1 is the top. Reach G without stepping into a hole."
)
BOARD_VIEWS = ("every", "first")
DEMO_NOISE = ("any", "safe")
MOVE_LISTS = ("none", "safe", "holes")


def render_board(desc: list[str], position: int) -> str:
    """The map with `A` at `position` (row-major index)."""
    width = len(desc[0])
    rows = [list(row) for row in desc]
    rows[position // width][position % width] = "A"
    return "\n".join("".join(row) for row in rows)


def describe_position(
    desc: list[str],
    position: int,
    compact: bool = False,
    sight: int = 1,
    move_list: str = "none",
) -> str:
    """The walker's row and column, what lies in each of the four directions and where the
    goal lies, e.g. "Row 2, column 3. left F, down H, right edge, up F. Goal: 2 down, 1 right.";
    `compact`: the same facts in fewer tokens, "At 2,3: left=F down=H right=edge up=F. Goal: 2
    down, 1 right." (~35 tokens of the tiny model's BPE instead of ~49). `sight`: the cells
    named in each direction, nearest first, up to the edge ("down=F,H" with `sight=2`).
    `move_list`: "safe" ends the line with the moves that do not step into a hole (`safe_moves`:
    bumping into the edge counts as safe), "Safe: left, right, up."; "holes" with those that
    do, "Holes: down." ("Holes: none." when none do); "none" adds nothing.

    The board alone is not enough for the tiny model: its byte-level BPE merges board letters
    across cells and rows ("FFF\nF" is one token), so which letter sits next to `A` cannot be
    read off token positions. The board stays; this line names the cells a move reaches. The
    move list names the danger in the words the model writes as its action: with "down=H"
    alone, 6% of its moves still stepped into the hole the line named (docs/multi_step.md).
    """
    if move_list not in MOVE_LISTS:
        raise ValueError(f"move_list must be one of {MOVE_LISTS}, got {move_list!r}")
    width, height = len(desc[0]), len(desc)
    row, col = divmod(position, width)
    cells = {}
    for name, (dr, dc) in MOVES.items():
        seen = []
        for k in range(1, sight + 1):
            r, c = row + k * dr, col + k * dc
            if not (0 <= r < height and 0 <= c < width):
                seen.append("edge")
                break
            seen.append(desc[r][c])
        cells[name] = ",".join(seen)
    goal_row, goal_col = divmod("".join(desc).index("G"), width)
    down, right = goal_row - row, goal_col - col
    vertical = (abs(down), "down" if down > 0 else "up")
    horizontal = (abs(right), "right" if right > 0 else "left")
    goal = ", ".join(f"{n} {word}" for n, word in (vertical, horizontal) if n) or "here"
    listed = ""
    if move_list != "none":
        safe = safe_moves(desc, position)
        moves = safe if move_list == "safe" else [m for m in MOVES if m not in safe]
        listed = f" {move_list.capitalize()}: {', '.join(moves) or 'none'}."
    if compact:
        around = " ".join(f"{name}={cell}" for name, cell in cells.items())
        return f"At {row + 1},{col + 1}: {around}. Goal: {goal}.{listed}"
    around = ", ".join(f"{name} {cell}" for name, cell in cells.items())
    return f"Row {row + 1}, column {col + 1}. {around}. Goal: {goal}.{listed}"


def safe_moves(desc: list[str], position: int) -> list[str]:
    """The actions from `position` that do not step into a hole (bumping into the edge, which
    leaves the walker where it is, counts as safe)."""
    width, height = len(desc[0]), len(desc)
    row, col = divmod(position, width)
    safe = []
    for name, (dr, dc) in MOVES.items():
        r, c = row + dr, col + dc
        if not (0 <= r < height and 0 <= c < width) or desc[r][c] != "H":
            safe.append(name)
    return safe


def generate_tasks(
    n: int, seed: int = 0, size: int = 4, p_frozen: float = 0.8
) -> list[dict[str, Any]]:
    """`n` tasks on random solvable `size` x `size` maps (Gymnasium's own generator)."""
    rng = random.Random(f"frozen_lake-{seed}-{size}")
    tasks = []
    for i in range(n):
        desc = generate_random_map(size=size, p=p_frozen, seed=rng.randrange(2**31))
        tasks.append({"task_id": f"frozen_lake-{size}-s{seed}-{i}", "map": desc})
    return tasks


def shortest_path(desc: list[str], position: int | None = None) -> list[str]:
    """Action names of a shortest safe path to G from `position` (row-major; default: S),
    by breadth-first search."""
    width, height = len(desc[0]), len(desc)
    if position is None:
        position = "".join(desc).index("S")
    start = divmod(position, width)
    frontier, seen = [(start, [])], {start}
    while frontier:
        next_frontier = []
        for (r, c), path in frontier:
            if desc[r][c] == "G":
                return path
            for name, (dr, dc) in MOVES.items():
                nr, nc = r + dr, c + dc
                if (
                    0 <= nr < height
                    and 0 <= nc < width
                    and desc[nr][nc] != "H"
                    and (nr, nc) not in seen
                ):
                    seen.add((nr, nc))
                    next_frontier.append(((nr, nc), [*path, name]))
        frontier = next_frontier
    raise ValueError(f"map {desc} has no path from S to G")


def _move(call_id: str, action: str, reply: str) -> list[Message]:
    """An assistant `act` call and the tool's reply."""
    arguments = json.dumps({"action": action})
    call = {"id": call_id, "type": "function", "function": {"name": "act", "arguments": arguments}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": "act", "content": reply},
    ]


class FrozenLakeEnv(GymnasiumAgentEnv):
    """FrozenLake-v1 as an agent env. A task may carry `"map"` (rows of S/F/H/G).

    Args:
        is_slippery: Gymnasium's slippery ice (moves go astray); off by default.
        max_moves: moves before the game is out of time.
        size: side of the generated maps.
        p_frozen: share of frozen (safe) tiles in generated maps.
        board: "every": the board and the position line after every move; "first": the board
            (and position line) in the first prompt, then the position line alone after each
            move. The same information either way (the first board stays in the context);
            "first" (with the compact position line) makes a move and its reply ~75 tokens
            instead of ~105.
        sight: cells the position line names in each direction (1: the four neighbours; 2:
            also the cells beyond them, which tell a dead end one move ahead).
        demo_noise: the random moves of `demonstrations`: "any" of the four, or "safe" (none
            into a hole).
        move_list: "none"; "safe": the position line ends with the moves that do not step
            into a hole ("Safe: left, up."); "holes": with those that do ("Holes: down.").
    """

    def __init__(
        self,
        is_slippery: bool = False,
        max_moves: int = 30,
        size: int = 4,
        p_frozen: float = 0.8,
        board: str = "every",
        sight: int = 1,
        demo_noise: str = "any",
        move_list: str = "none",
    ) -> None:
        if board not in BOARD_VIEWS:
            raise ValueError(f"board must be one of {BOARD_VIEWS}, got {board!r}")
        if int(sight) < 1:
            raise ValueError(f"sight must be an int >= 1, got {sight!r}")
        if demo_noise not in DEMO_NOISE:
            raise ValueError(f"demo_noise must be one of {DEMO_NOISE}, got {demo_noise!r}")
        if move_list not in MOVE_LISTS:
            raise ValueError(f"move_list must be one of {MOVE_LISTS}, got {move_list!r}")
        self.board, self.sight, self.demo_noise = board, int(sight), demo_noise
        self.move_list = move_list
        super().__init__(
            "FrozenLake-v1",
            render=lambda env, obs: self._view(int(obs)),
            instructions=INSTRUCTIONS,
        )
        self.is_slippery = is_slippery
        self.max_moves = max_moves
        self._desc = DEFAULT_MAP
        self.size, self.p_frozen = int(size), float(p_frozen)

    def _view(self, position: int) -> str:
        """A move's observation: the board (unless shown in the first prompt only) and the
        position line."""
        line = describe_position(
            self._desc, position, self.board == "first", self.sight, self.move_list
        )
        return line if self.board == "first" else f"{render_board(self._desc, position)}\n{line}"

    def prompt(self, task: dict[str, Any]) -> list[Message]:
        messages = super().prompt(task)
        if self.board == "first":  # the board once, above the position line
            board = render_board(self._desc, int(self._observation))
            messages[-1] = {**messages[-1], "content": f"{board}\n{messages[-1]['content']}"}
        return messages

    def default_task(self, seed: int) -> dict[str, Any]:
        return generate_tasks(1, seed=seed, size=self.size, p_frozen=self.p_frozen)[0]

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """The `split` share of `n` random solvable maps (split by the map itself)."""
        generated = generate_tasks(n, seed=seed, size=self.size, p_frozen=self.p_frozen)
        return holdout(generated, split, key=lambda task: "frozen_lake:" + "/".join(task["map"]))

    def demonstrations(
        self, n: int, seed: int, demo_fraction: float
    ) -> list[tuple[list[Message], list[ToolSpec]]]:
        """Noisy shortest-path games on random maps (the env's own tool replies): each move
        follows a shortest path from where the walker stands, except that with probability
        `1 - demo_fraction` it is a random move (`demo_noise="any"`: any of the four, which
        may end in a hole; "safe": one that does not step into a hole, which may still
        wander off or bump into the edge; the walk goes on from there). RL has to make the
        walks clean. Each comes with the tool specs it was played with."""
        rng = random.Random(f"frozen_lake-demos-{seed}")
        convos = []
        for task in generate_tasks(n, seed=seed + 7919, size=self.size, p_frozen=self.p_frozen):
            messages, tools = run_sync(self.reset(task, 0))
            convo = list(messages)
            for k in range(self.max_moves):
                path = shortest_path(self._desc, int(self._observation))
                if rng.random() < demo_fraction:
                    action = path[0]
                elif self.demo_noise == "safe":
                    action = rng.choice(safe_moves(self._desc, int(self._observation)))
                else:
                    action = rng.choice(ACTIONS)
                convo += _move(f"call_{k}", action, self._act(action))
                if self.terminated or self.truncated:
                    break
            convos.append((convo, tools))
        run_sync(self.close())
        return convos

    def state_key(self) -> str:
        """The walker's cell: where the next move starts (GiGPO's step-level groups)."""
        return str(int(self._observation))

    def corpus(self) -> list[str]:
        """Boards as the model sees them, for the tiny model's tokenizer."""
        return [render_board(list(t["map"]), 0) for t in generate_tasks(50, seed=12345)]

    def make_gym_env(self, task: dict[str, Any]) -> gymnasium.Env:
        if self.gym_env is not None:
            self.gym_env.close()
        self._desc = list(task.get("map") or DEFAULT_MAP)
        self.gym_env = gymnasium.make(
            "FrozenLake-v1",
            desc=self._desc,
            is_slippery=self.is_slippery,
            max_episode_steps=self.max_moves,
        )
        return self.gym_env

    def outcome(self, terminated: bool, truncated: bool) -> str:
        if terminated:
            return "goal" if self.env_return > 0 else "hole"
        return "out_of_time" if truncated else "stopped"

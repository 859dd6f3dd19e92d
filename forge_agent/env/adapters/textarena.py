"""TextArena's two-player games as seated envs: `env.id=textarena:<game>`.

    python -m apps.agent.main env.id=textarena:TicTacToe-v0 \
        'env.seats={player_0: policy, player_1: policy}' rollout.max_turns=5

- seats: `player_0`, `player_1` (TextArena's players 0 and 1; player 0 moves first).
- observations: the game's own text (TextArena's `-raw` variant: the entries a player has not
  seen yet), one user message per turn; the opponent's moves appear as `[Player k] <move>`.
  The system message names the game and the seat.
- moves: the assistant message's text, as the game reads it (`[4]` in tic-tac-toe, `[0 3]` in
  Nim). An invalid move is the game's business: TextArena tells the player and lets it retry
  (its error allowance), then scores the offender as the loser.
- rewards: `{"outcome": r}` per seat from TextArena (two-player games: 1 win, -1 loss, 0 draw,
  zero-sum, so `zero_sum = True` and the engine checks it). info: `outcome` (TextArena's
  reason), `invalid_move` per seat.
- tasks: start seeds of the game, split between train and eval by a hash.
- demonstrations (warm start): conversations of one seat playing uniformly random legal moves
  (games that list their `Available Moves`, e.g. tic-tac-toe), so the model learns the format.

TextArena is an optional dependency (`pip install -e '.[ecosystems]'`); a missing package or an
unknown game is an `EnvSetupError` naming the id.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from forge_agent.env.protocol import SeatEnv, message_text
from forge_agent.env.sources import EnvSetupError, Split, holdout
from forge_agent.types import Message, SeatStart, SeatStep

__all__ = ["PIP_INSTALL", "TextArenaEnv", "legal_moves"]

PIP_INSTALL = "pip install textarena==0.7.4  (or: pip install -e '.[ecosystems]')"

_MOVES = re.compile(r"Available Moves:\s*(.*)")
_CELLS = re.compile(r"Board: (\S) (\S) (\S) / (\S) (\S) (\S) / (\S) (\S) (\S)\.")
_COLUMNS = re.compile(r"0 1 2 3 4 5 6\n-+\n([.XO](?: [.XO]){6})")
"""A Connect Four board's column header and top row (a column is open while its top is `.`)."""


def legal_moves(text: str) -> list[str]:
    """The moves an observation lists (`Available Moves: '[0]', '[1]'`), the free cells of
    the cells view's `Board: 0 X 2 / ...` as `[0]`, `[2]`, or the open columns of the last
    Connect Four board as `[3]`; else []."""
    found, views = _MOVES.findall(text), list(_CELLS.finditer(text))
    if views and (not found or views[-1].start() > text.rfind("Available Moves:")):
        return [f"[{c}]" for c in views[-1].groups() if c.isdigit()]
    if found:
        return re.findall(r"'(\[[^\]]*\])'", found[-1])
    boards = _COLUMNS.findall(text)
    return [f"[{c}]" for c, top in enumerate(boards[-1].split()) if top == "."] if boards else []


def _textarena(env_id: str) -> Any:
    try:
        import textarena
    except ImportError as exc:
        raise EnvSetupError(env_id, "textarena", f"not installed: {PIP_INSTALL}") from exc
    return textarena


class TextArenaEnv(SeatEnv):
    """A TextArena two-player game; `game`: its id, e.g. "TicTacToe-v0" or "Nim-v0".

    `board_only`: each observation is only the game's latest board (and its notices of invalid
    moves), without the rules and move descriptions: short prompts for small models.
    `cells` (tic-tac-toe, implies `board_only`): the board on one line, each cell its number
    when free or its mark, row by row, and the seat's mark: `You are O. Board: 0 X 2 / 3 O 5 /
    6 7 8.` instead of the 3x3 drawing and its list of moves (the same state, short, every cell
    at a fixed place, the free ones the only digits; no hint of a move).
    `demo_player`: how the demonstrated seat plays in `demonstrations()`: "random" (uniformly
    random legal moves) or "stack" (Connect Four: in a share `demo_fraction` of the games it
    keeps dropping into its last column while that column is open, a plan that beats a random
    player more often than not; random moves otherwise).
    """

    seats: ClassVar[tuple[str, ...]] = ("player_0", "player_1")
    zero_sum: ClassVar[bool] = True
    required_fields: ClassVar[tuple[str, ...]] = ()
    failure_reward: ClassVar[float] = -1.0  # a forfeit or a failed move is a lost game

    def __init__(
        self,
        game: str = "TicTacToe-v0",
        board_only: bool = False,
        cells: bool = False,
        demo_player: str = "random",
    ) -> None:
        ta = _textarena(f"textarena:{game}")
        base = game.removesuffix("-raw")
        known = ta.envs.registration.ENV_REGISTRY
        if f"{base}-raw" not in known:
            near = [k for k in known if k.lower().startswith(base.split("-")[0].lower()[:4])]
            where = f"textarena:{game}"
            raise EnvSetupError(where, "TextArena's registry", f"unknown game; near: {near[:8]}")
        if cells and base != "TicTacToe-v0":
            where = f"textarena:{game}"
            raise EnvSetupError(where, "env.kwargs.cells", "only TicTacToe-v0 has a cells view")
        if demo_player not in ("random", "stack"):
            where = f"textarena:{game}"
            raise EnvSetupError(where, "env.kwargs.demo_player", "expected 'random' or 'stack'")
        self.game, self.board_only, self.cells = base, board_only or cells, cells
        self.demo_player = demo_player
        self._ta = ta
        self._env: Any = None

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """Start seeds `seed * n ... seed * n + n - 1` of the game, the `split` share of them."""
        starts = [
            {"task_id": f"{self.game}-seed{s}", "seed": s} for s in range(seed * n, (seed + 1) * n)
        ]
        return holdout(starts, split, key=lambda task: f"{self.game}:{task['seed']}")

    def default_task(self, seed: int) -> dict[str, Any]:
        return {"task_id": f"{self.game}-seed{seed}", "seed": seed}

    def system_prompt(self, seat: str) -> str:
        player = self.seats.index(seat)
        if self.cells:
            return f"{self.game}, Player {player}. Reply with a free cell as [n]."
        if self.board_only and self.game.startswith("ConnectFour"):
            return f"{self.game}, Player {player}. Reply with an open column as [n]."
        if self.board_only:
            return f"{self.game}, Player {player}. Reply with one of the Available Moves."
        return (
            f"You are Player {player} in the game {self.game}. On your turn, reply with only "
            "your move, in the format the game asks for."
        )

    def reset(self, task: dict[str, Any], seed: int | None = None) -> SeatStart:
        return self._reset(task, seed)

    def step(self, assistant_message: Message) -> SeatStep:
        return self._step(assistant_message)

    def _reset(self, task: dict[str, Any], seed: int | None = None) -> SeatStart:
        seed = task["seed"] if task.get("seed") is not None else seed
        self._env = self._ta.make(f"{self.game}-raw")
        self._env.reset(num_players=len(self.seats), seed=seed)
        pid, observation = self._env.get_observation()
        seats: dict[str, tuple[list[Message], list[Any]]] = {
            s: ([{"role": "system", "content": self.system_prompt(s)}], []) for s in self.seats
        }
        seats[self.seats[pid]][0].append(self._message(pid, observation))
        return SeatStart(seats=seats, turn=self.seats[pid], zero_sum=self.zero_sum)

    def _step(self, assistant_message: Message) -> SeatStep:
        if self._env is None:
            raise RuntimeError("TextArenaEnv.step() called before reset()")
        done, _ = self._env.step(message_text(assistant_message).strip())
        if not done:
            pid, observation = self._env.get_observation()
            seat = self.seats[pid]
            return SeatStep(messages={seat: [self._message(pid, observation)]}, turn=seat)
        rewards, game_info = self._env.close()
        rewards = rewards or {}
        reasons = [i.get("reason") for i in game_info.values() if i.get("reason")]
        invalid = {self.seats[p]: bool(i.get("invalid_move")) for p, i in game_info.items()}
        info: dict[str, Any] = {"outcome": reasons[0] if reasons else "", "invalid_move": invalid}
        return SeatStep(
            rewards={self.seats[p]: {"outcome": float(r)} for p, r in rewards.items()},
            done=True,
            info=info,
        )

    def close(self) -> None:
        self._env = None

    def _message(self, pid: int, observation: Any) -> Message:
        """A player's unseen observation entries as one user message."""
        parts = []
        entries = observation if isinstance(observation, list) else [(-1, observation, None)]
        if self.board_only:
            kinds = [getattr(e[2], "name", "") for e in entries]
            boards = [i for i, k in enumerate(kinds) if k == "GAME_BOARD"]
            keep = {i for i, k in enumerate(kinds) if k == "GAME_ADMIN"} | set(boards[-1:])
            entries = [e for i, e in enumerate(entries) if i in keep]
        for entry in entries:
            sender, text = entry[0], str(entry[1])
            if sender == pid:
                continue  # its own move is already in its history
            if self.cells and getattr(entry[2], "name", "") == "GAME_BOARD":
                text = tictactoe_cells(tictactoe_board(text), "O" if pid == 0 else "X")
            parts.append(text if sender == -1 else f"[Player {sender}] {text}")
        return {"role": "user", "content": "\n".join(parts)}

    def corpus(self) -> list[list[Message]]:
        """Tokenizer text: a few games' conversations (when the tiny model's corpus names it)."""
        return self.demonstrations(16, seed=0, demo_fraction=1.0)

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[Message]]:
        """Conversations of one seat playing legal moves (`demo_player`) against a random
        opponent (games that list their legal moves, and Connect Four); the seat alternates."""
        rng = random.Random(seed)
        demos = []
        for i in range(n):
            seat = self.seats[i % len(self.seats)]
            stack = self.demo_player == "stack" and rng.random() < demo_fraction
            demo = self._random_game(rng, seat, rng.randrange(1 << 30), stack)
            if demo:
                demos.append(demo)
        return demos

    def _random_game(
        self, rng: random.Random, seat: str, game_seed: int, stack: bool = False
    ) -> list[Message]:
        """One game of random legal moves (`seat`'s own: its last move again while legal, when
        `stack`); the conversation `seat` saw and played ([] when the game lists no moves)."""
        start = self._reset({"seed": game_seed})
        seen = {s: list(start.seats[s][0]) for s in self.seats}  # what each seat has read
        convo = [m for m in seen[seat] if m["role"] == "system"]
        read = len(convo)
        turn: str | None = start.turn
        for _ in range(64):
            assert turn is not None
            moves = legal_moves(message_text(seen[turn][-1]))
            if not moves:
                self._env = None
                return []
            last = convo[-1]["content"] if convo and convo[-1]["role"] == "assistant" else None
            keep = stack and turn == seat and last in moves
            move: Message = {"role": "assistant", "content": last if keep else rng.choice(moves)}
            if turn == seat:
                convo.extend(seen[seat][read:])
                convo.append(move)
                seen[seat].append(move)
                read = len(seen[seat])
            step = self._step(move)
            for s, messages in step.messages.items():
                seen[s].extend(messages)
            if step.done:
                break
            turn = step.turn
        self._env = None
        return convo


# -- scripted opponents (`env.seats.player_1=forge_agent.env.adapters.textarena:random_move`) ---


def random_move(messages: list[Message], tools: list[Any]) -> str:
    """A uniformly random move among those the last observation lists (games that list their
    `Available Moves`); "[0]" when none is listed."""
    moves = legal_moves(message_text(messages[-1])) if messages else []
    return random.choice(moves) if moves else "[0]"


_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def tictactoe_board(text: str) -> list[str]:
    """The 9 cells of the last board in a tic-tac-toe observation (the 3x3 drawing or the
    cells view): "O", "X" or "" (empty)."""
    views = list(_CELLS.finditer(text))
    rows = re.findall(r"^ ?(\S) \| (\S) \| (\S) ?$", text, re.MULTILINE)[-3:]
    if views and (len(rows) < 3 or views[-1].start() > text.rfind(" | ")):
        cells = list(views[-1].groups())
    else:
        cells = [c for row in rows for c in row]
    return [c if c in ("O", "X") else "" for c in cells] if len(cells) == 9 else [""] * 9


def tictactoe_cells(board: list[str], mine: str) -> str:
    """The cells view of a tic-tac-toe board for the player of mark `mine`:
    `You are O. Board: 0 X 2 / 3 O 5 / 6 7 8.` (a free cell shows its number)."""
    shown = [board[i] or str(i) for i in range(9)]
    rows = " / ".join(" ".join(shown[r : r + 3]) for r in (0, 3, 6))
    return f"You are {mine}. Board: {rows}."


def tictactoe_heuristic(messages: list[Message], tools: list[Any]) -> str:
    """A fixed tic-tac-toe player: win if it can, else block the opponent's line, else the
    centre, else a corner, else any free cell (ties broken at random)."""
    text = message_text(messages[-1]) if messages else ""
    board = tictactoe_board(text)
    mine = _tictactoe_mark(messages)
    free = [i for i in range(9) if not board[i]]
    legal = {int(m.strip("[]")) for m in legal_moves(text)} or set(free)
    free = [i for i in free if i in legal] or sorted(legal)
    for mark in (mine, "X" if mine == "O" else "O"):  # win, then block
        for line in _LINES:
            cells = [board[i] for i in line]
            if cells.count(mark) == 2 and cells.count("") == 1:
                cell = line[cells.index("")]
                if cell in free:
                    return f"[{cell}]"
    for group in ([4], [0, 2, 6, 8], list(range(9))):
        options = [c for c in group if c in free]
        if options:
            return f"[{random.choice(options)}]"
    return "[0]"


def _tictactoe_mark(messages: list[Message]) -> str:
    """The heuristic's own mark, read from the seat's opening message (the env's framing,
    "You are Player N ...", written before any move): Player 0 plays 'O' in TicTacToe-v0.
    Never from later messages, where the other seat's text is echoed and could claim a role."""
    opening = message_text(messages[0]) if messages else ""
    found = re.match(r"You are Player (\d+)\b", opening)
    return "O" if found and found.group(1) == "0" else "X"


def tictactoe_mixed(messages: list[Message], tools: list[Any]) -> str:
    """A tic-tac-toe player between `random_move` and `tictactoe_heuristic`: each move the
    heuristic's with probability 1/2, else a uniformly random legal one (it takes half the
    wins and blocks it sees), so a policy trained against it meets lines to block and wins."""
    if random.random() < 0.5:
        return tictactoe_heuristic(messages, tools)
    return random_move(messages, tools)

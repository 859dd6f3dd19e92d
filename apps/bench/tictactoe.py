"""Tic-tac-toe win rates of policies against scripted players (docs/multi_agent.md).

    python -m apps.bench.tictactoe --models BEFORE AFTER --labels before after --games 100 \
        --out tictactoe.json

Each model plays player_0 (O, the first mover) of TextArena's TicTacToe-v0 (`board_only`
observations, as apps/agent/tictactoe.yaml trains it) against `random_move` and
`tictactoe_heuristic`, sampling at temperature 1 through a transformers copy of the model
(`SnapshotPlayer`, the same code that plays frozen opponents); game g uses seed g for every
model, so the models meet the same openings. Prints a table of win / draw / loss rates
(a game a seat forfeits by invalid moves is a loss; one cut at `--max-moves` is "unfinished")
and writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path

OPPONENTS = ("random_move", "tictactoe_heuristic")


class _Disk:
    """A weight store that holds nothing: the snapshot player plays the model on disk."""

    async def versions(self) -> list[int]:
        return []


async def play(
    model: str, opponent: str, games: int, max_moves: int = 7, cells: bool = True
) -> dict[str, float]:
    """Win / draw / loss / unfinished rates of `model` (player_0) against `opponent`; `cells`:
    the cells view of the board (as apps/agent/tictactoe.yaml trains), else the 3x3 drawing."""
    import torch

    from forge_agent.env.adapters import textarena
    from forge_agent.env.adapters.textarena import TextArenaEnv
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer
    from forge_agent.rollout.players import SnapshotPlayer

    policy = SnapshotPlayer(_Disk(), model, ChatRenderer(load_tokenizer(model)), offset=0)
    script = getattr(textarena, opponent)
    counts = {"win": 0, "draw": 0, "loss": 0, "unfinished": 0}
    for g in range(games):
        random.seed(g)
        torch.manual_seed(g)
        env = TextArenaEnv("TicTacToe-v0", board_only=True, cells=cells)
        start = env._reset({"seed": g})
        seen = {s: list(start.seats[s][0]) for s in env.seats}
        turn, moves, result = start.turn, 0, None
        while moves < 2 * max_moves:
            if turn == "player_0":
                move = await policy.act(seen[turn], [], version=0)
            else:
                move = {"role": "assistant", "content": script(seen[turn], [])}
            seen[turn].append(move)
            step = env._step(move)
            moves += 1
            for seat, messages in step.messages.items():
                seen[seat].extend(messages)
            if step.done:
                result = step.rewards["player_0"]["outcome"]
                break
            turn = step.turn
        if result is None:
            counts["unfinished"] += 1
        else:
            counts["win" if result > 0 else "loss" if result < 0 else "draw"] += 1
    return {k: v / games for k, v in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, help="policy folders")
    parser.add_argument("--labels", nargs="*", default=None, help="a name per model")
    parser.add_argument("--games", type=int, default=128, help="games per model and opponent")
    parser.add_argument(
        "--view",
        choices=("cells", "board"),
        default="cells",
        help="observations: the cells view (env.kwargs.cells, the default) or the 3x3 drawing",
    )
    parser.add_argument("--out", default="tictactoe.json", help="where the JSON goes")
    args = parser.parse_args()
    labels = args.labels or [Path(m).name for m in args.models]
    rows = []
    for model, label in zip(args.models, labels, strict=True):
        for opponent in OPPONENTS:
            rates = asyncio.run(play(model, opponent, args.games, cells=args.view == "cells"))
            row = {"model": label, "path": model, "opponent": opponent, "games": args.games}
            rows.append({**row, **rates})
            print(
                f"{label[:24]:24s} vs {opponent:20s} win {rates['win']:.3f} "
                f"draw {rates['draw']:.3f} loss {rates['loss']:.3f} "
                f"unfinished {rates['unfinished']:.3f}",
                flush=True,
            )
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

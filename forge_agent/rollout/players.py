"""Who plays each seat of a multi-seat episode (`env.seats: {player_0: policy, player_1: ...}`).

Player specs (strings, as the config writes them):
- `policy`: the policy being trained; its seats yield trajectories (all seats: self-play).
- `snapshot:-k`: a frozen earlier version of the policy, k versions behind the newest the
  weight store holds (the oldest it still holds early in a run); needs
  `weight_store.max_versions > k`.
- `league:k`: each episode, one of the last k versions the store holds, at random.
- `scripted:module:function` or `module:function`: a Python function
  `fn(messages, tools) -> str | Message` (may be async) that answers the seat's messages.
- `endpoint:<base_url>[#<model>]`: any OpenAI-compatible Chat Completions server.

Only policy seats are trained; the other seats' moves are part of their env. An opponent that
fails (a scripted function that raises, an endpoint that does not answer, a snapshot the store
no longer holds) raises `EnvFailure(ENV_ERROR)`: the episode ends `env_error` and its
trajectories leave the baselines.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from forge_agent.env.protocol import EnvFailure, maybe_await
from forge_agent.env.registry import load_entry_point
from forge_agent.types import Message, Status, ToolSpec

if TYPE_CHECKING:
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.weights.protocol import WeightStore

__all__ = [
    "POLICY",
    "EndpointPlayer",
    "Player",
    "PlayerSpec",
    "ScriptedPlayer",
    "SnapshotPlayer",
    "build_players",
    "check_seats",
    "parse_player",
]

POLICY = "policy"


class Player(Protocol):
    """An opponent (or partner): answers one seat's conversation with an assistant message."""

    label: str

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Message: ...


@dataclass(frozen=True)
class PlayerSpec:
    """A parsed player spec: `kind` is policy | snapshot | league | scripted | endpoint."""

    kind: str
    arg: Any = None
    text: str = ""


def parse_player(seat: str, spec: object) -> PlayerSpec:
    """The `PlayerSpec` of `env.seats[seat]`; a ValueError naming the seat and the spec."""
    text = str(spec).strip() if spec is not None else ""
    where = f"env.seats.{seat}={spec!r}"
    if not text:
        raise ValueError(
            f"{where}: no player assigned; expected 'policy', 'snapshot:-k', "
            "'league:k', 'module:function' or 'endpoint:<url>'"
        )
    if text == POLICY:
        return PlayerSpec("policy", None, text)
    kind, _, rest = text.partition(":")
    if kind in ("snapshot", "league"):
        try:
            k = abs(int(rest))
        except ValueError:
            raise ValueError(f"{where}: expected {kind}:-k with an int k >= 1") from None
        if k < 1:
            raise ValueError(f"{where}: expected {kind}:-k with an int k >= 1")
        return PlayerSpec(kind, k, text)
    if kind == "endpoint":
        if not rest.startswith(("http://", "https://")):
            raise ValueError(f"{where}: expected endpoint:http(s)://host:port/v1[#model]")
        url, _, model = rest.partition("#")
        return PlayerSpec("endpoint", (url, model or "default"), text)
    target = rest if kind == "scripted" else text
    if ":" not in target:
        raise ValueError(
            f"{where}: unknown player; expected 'policy', 'snapshot:-k', "
            "'league:k', 'module:function' or 'endpoint:<url>'"
        )
    return PlayerSpec("scripted", target, text)


def check_seats(
    seats: dict[str, Any], declared: tuple[str, ...], env_id: str, max_versions: int | None = None
) -> dict[str, PlayerSpec]:
    """`env.seats` checked against the seats env `env_id` declares: every seat has a player,
    no unknown seat, at least one policy seat, snapshots the weight store keeps."""
    if not declared:
        raise ValueError(f"env.seats is set but env {env_id!r} declares no seats (a one-seat env)")
    unknown = sorted(set(seats) - set(declared))
    if unknown:
        raise ValueError(
            f"env.seats names {unknown}, not seats of env {env_id!r} (its seats: {list(declared)})"
        )
    missing = [s for s in declared if s not in seats]
    if missing:
        raise ValueError(
            f"env.seats: no player assigned to seat(s) {missing} of env {env_id!r}; "
            f"set env.seats.{missing[0]}=policy (or an opponent)"
        )
    specs = {seat: parse_player(seat, seats[seat]) for seat in declared}
    if not any(p.kind == "policy" for p in specs.values()):
        raise ValueError(f"env.seats: no seat of env {env_id!r} is played by the policy")
    for seat, p in specs.items():
        if p.kind in ("snapshot", "league") and max_versions is not None and p.arg >= max_versions:
            raise ValueError(
                f"env.seats.{seat}={p.text!r}: version -{p.arg} is older than the weight "
                f"store keeps (weight_store.max_versions={max_versions}); set "
                f"weight_store.max_versions={p.arg + 1} or more"
            )
    return specs


def build_players(
    specs: dict[str, PlayerSpec],
    *,
    store: WeightStore | None = None,
    model_path: str | Path | None = None,
    renderer: ChatRenderer | None = None,
    timeout_s: float = 30.0,
    max_new_tokens: int = 48,
    temperature: float = 1.0,
) -> dict[str, Player | None]:
    """The players of `specs` (from `check_seats`); None marks a policy seat. Snapshots read
    `store` and copy the policy at `model_path`."""
    players: dict[str, Player | None] = {}
    for seat, p in specs.items():
        if p.kind == "policy":
            players[seat] = None
        elif p.kind == "scripted":
            players[seat] = ScriptedPlayer(p.arg, seat)
        elif p.kind == "endpoint":
            url, model = p.arg
            players[seat] = EndpointPlayer(url, model, seat, timeout_s, max_new_tokens, temperature)
        else:
            if store is None:
                raise ValueError(f"env.seats.{seat}={p.text!r} needs the run's weight store")
            players[seat] = SnapshotPlayer(
                store, model_path, renderer, p.arg, p.kind == "league", seat,
                max_new_tokens, temperature,
            )  # fmt: skip
    return players


class ScriptedPlayer:
    """A Python function answers the seat: `fn(messages, tools) -> str | Message`."""

    def __init__(self, function: Callable[..., object], seat: str = "") -> None:
        self.fn = load_entry_point(function)
        self.label = function if isinstance(function, str) else getattr(function, "__name__", "?")
        self.seat = seat

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Message:
        try:
            answer = await maybe_await(self.fn(list(messages), list(tools)))
        except Exception as exc:
            raise EnvFailure(
                Status.ENV_ERROR, f"scripted player {self.label} of seat {self.seat!r}: {exc!r}"
            ) from exc
        return _as_message(answer)


class EndpointPlayer:
    """An OpenAI-compatible Chat Completions server answers the seat."""

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        seat: str = "",
        timeout_s: float = 30.0,
        max_tokens: int = 64,
        temperature: float = 1.0,
    ) -> None:
        self.base_url, self.model, self.seat = base_url, model, seat
        self.label = f"endpoint:{base_url}#{model}"
        self.timeout_s, self.max_tokens, self.temperature = timeout_s, max_tokens, temperature
        self._client: Any = None

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Message:
        from openai import AsyncOpenAI

        if self._client is None:
            self._client = AsyncOpenAI(
                base_url=self.base_url, api_key="none", timeout=self.timeout_s, max_retries=0
            )
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        try:
            reply = await self._client.chat.completions.create(
                model=self.model,
                messages=[_plain(m) for m in messages],
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                **kwargs,
            )
            choice = reply.choices[0].message
        except Exception as exc:
            # a request the endpoint refuses as too long (HTTP 400) is the game's transcript,
            # which the policy's messages fill: the policy's failure, not infra
            refused = getattr(exc, "status_code", None) == 400
            raise EnvFailure(
                Status.POLICY_ERROR if refused else Status.ENV_ERROR,
                f"opponent endpoint {self.base_url} (seat {self.seat!r}) did not answer: {exc}",
            ) from exc
        message: Message = {"role": "assistant", "content": choice.content or ""}
        if choice.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in choice.tool_calls]
        return message


class SnapshotPlayer:
    """A frozen earlier policy version from the weight store answers the seat (a transformers
    copy of the policy in this process, loaded with that version's weights).

    `offset=k`, `league=False`: k versions behind the newest held; `league=True`: one of the
    last k held versions at random, per call of `choose()` (once per episode).
    """

    def __init__(
        self,
        store: WeightStore,
        model_path: str | Path,
        renderer: ChatRenderer,
        offset: int,
        league: bool = False,
        seat: str = "",
        max_new_tokens: int = 48,
        temperature: float = 1.0,
    ) -> None:
        self.store, self.model_path, self.renderer = store, model_path, renderer
        self.offset, self.league, self.seat = offset, league, seat
        self.label = f"{'league' if league else 'snapshot'}:-{offset}"
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self._model: Any = None
        self._loaded: int | None = None
        self._lock = asyncio.Lock()

    async def choose(self, rng: random.Random | None = None) -> int:
        """The version one episode plays against (the runner passes it to `act`): among the
        versions the store holds and version 0, the initial policy at `model_path`."""
        try:
            held = sorted({0, *await self.store.versions()})
        except Exception as exc:
            raise EnvFailure(
                Status.ENV_ERROR, f"{self.label} (seat {self.seat!r}): weight store: {exc}"
            ) from exc
        if self.league:
            return (rng or random).choice(held[-self.offset :])
        return held[max(0, len(held) - 1 - self.offset)]

    async def act(
        self, messages: list[Message], tools: list[ToolSpec], version: int | None = None
    ) -> Message:
        version = version if version is not None else await self.choose()
        async with self._lock:
            try:
                if self._loaded != version:
                    state = await self.store.get(version) if version else None
                    await asyncio.to_thread(self._load, state)
                    self._loaded = version
            except Exception as exc:
                raise EnvFailure(
                    Status.ENV_ERROR,
                    f"{self.label} (seat {self.seat!r}): version {version} is not in the weight "
                    f"store any more: {exc}",
                ) from exc
            prompt = self.renderer.render_prompt(messages, tools)
            ids = await asyncio.to_thread(self._generate, prompt)
        return self.renderer.parse(ids, tools, prompt, call_prefix="snapshot")

    def _load(self, state: dict[str, Any] | None) -> None:
        """The policy at `model_path` with `state` loaded (None: its own weights, version 0)."""
        import torch
        from transformers import AutoModelForCausalLM

        if self._model is None or state is None:
            self._model = AutoModelForCausalLM.from_pretrained(
                str(self.model_path), dtype=torch.float32
            ).eval()
        if state is not None:
            self._model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)

    def _generate(self, prompt: list[int]) -> list[int]:
        import torch

        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = self._model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                do_sample=True,
                temperature=self.temperature,
                eos_token_id=self.renderer.stop_token_ids or None,
                pad_token_id=(self.renderer.stop_token_ids or [0])[0],
            )
        return out[0, len(prompt) :].tolist()


def _as_message(answer: Any) -> Message:
    if isinstance(answer, dict):
        return {"role": "assistant", **answer}
    return {"role": "assistant", "content": str(answer)}


def _plain(message: Message) -> Message:
    """A message as an OpenAI server takes it (role, content, tool calls, ids)."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    out = {k: message[k] for k in keep if k in message}
    if "tool_calls" in out:
        out["tool_calls"] = [
            {k: v for k, v in c.items() if k in ("id", "type", "function")}
            for c in out["tool_calls"]
        ]
    return out

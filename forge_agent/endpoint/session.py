"""Endpoint sessions: one episode's credential and its token-exact, append-only recording
(written through the one token history, `forge_agent.rollout.history`).

A session turns the chat requests of one agent program into one `Trajectory`:

    request 1: messages M1            -> full render P1 -> sample C1
                                      -> record P1 (mask 0), C1 (mask 1)
    request 2: messages M1 + [a1] + T -> bridge(P1, C1, T) -> P2 = P1 + C1 + tail(T)
                                      -> record tail(T) (mask 0), C2 (mask 1)
    request k: history that does not extend M(k-1) + [a(k-1)] (a harness dropped or edited a
               message, or changed its tools) -> full render, a new training segment

Sampled tokens are never re-tokenized: the assistant message the client sends back is only
compared with the one this session returned; its tokens are the ones the sampler produced.
A request changes the recording only once its completion exists (`commit`), so a request that
fails records nothing and leaves the session as it was.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from forge_agent.rollout.history import TokenHistory
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Completion, Message, Status, ToolSpec, Trajectory


class SessionError(Exception):
    """A request the endpoint refuses; `status` is the HTTP status, `param` the field."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


@dataclass
class Turn:
    """What one request will add to the recording once its completion is chosen."""

    context: list[int]  # the full prompt ids sent to the generator
    tail: list[int]  # the ids to append before the completion (all of `context` on a new segment)
    new_segment: bool
    messages: list[Message]  # the normalized request history
    tools: list[ToolSpec] | None
    rewrite: bool = False  # the history did not extend the session's (a new segment)


@dataclass
class Candidate:
    """One sampled choice: its completion and the assistant message returned for it."""

    completion: Completion
    message: Message
    cut: int  # how many of the completion's tokens belong to the choice (stop strings cut)
    finish_reason: str = "stop"  # as the client sees it: "stop" | "length" | "tool_calls"


@dataclass
class Session:
    """One episode's state on the endpoint. `key` is its credential (the client's api_key)."""

    key: str
    session_id: str
    trajectory: Trajectory
    recording: bool = True
    temperature: float | None = None  # set by training: overrides the request's temperature
    created: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The committed conversation: normalized messages whose tokens are in `context` + last turn.
    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSpec] | None = None
    history: TokenHistory = field(init=False)  # the recording; its prompt: the last one sent
    pending_turn: Turn | None = None
    pending: list[Candidate] = field(default_factory=list)  # choices of the last request
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "history_rewrites": 0})
    sampling: int = 0  # requests of this session the generator is sampling now

    def __post_init__(self) -> None:
        self.history = TokenHistory(self.trajectory)

    # ------------------------------------------------------------------ planning a request
    def plan(
        self, renderer: ChatRenderer, messages: list[Message], tools: list[ToolSpec] | None
    ) -> Turn:
        """The prompt for `messages`: bridged append-only onto the session's tokens when the
        history extends them, else a full render that starts a new segment."""
        normalized = [normalize_message(m) for m in messages]
        chosen = self._match(normalized, tools)
        if chosen is not None:
            candidate, prefix_len = chosen
            new_messages = messages[prefix_len:]
            sampled = candidate.completion.token_ids[: candidate.cut]
            bridged = self.history.next_prompt(renderer, new_messages, tools, completion=sampled)
            if bridged is not None:
                start = len(self.history.prompt) + len(sampled)
                return Turn(bridged, bridged[start:], False, normalized, tools)
        context = renderer.render_prompt(messages, tools)
        rewrite = bool(self.messages) and chosen is None
        return Turn(context, context, True, normalized, tools, rewrite=rewrite)

    def _match(
        self, normalized: list[Message], tools: list[ToolSpec] | None
    ) -> tuple[Candidate, int] | None:
        """The pending choice that `normalized` continues, and the length of the matched
        prefix (committed history + that choice's assistant message)."""
        if not self.pending or tools != self.tools:
            return None
        n = len(self.messages)
        if len(normalized) <= n + 1 or normalized[:n] != self.messages:
            return None
        for candidate in self.pending:
            if normalized[n] == candidate.message:
                return candidate, n + 1
        return None

    # ------------------------------------------------------------------ recording
    def commit(self, turn: Turn, candidates: list[Candidate]) -> None:
        """Record the request: first the choice the new history continued (if any), then
        this request's prompt tail; its own choices stay pending until the next request."""
        if self.pending:
            chosen = self._match(turn.messages, turn.tools)
            # On a rewrite the old segment ends with the first choice (it was sampled).
            self._record_sampled(chosen[0] if chosen is not None else self.pending[0])
        if turn.rewrite:
            self.stats["history_rewrites"] += 1
        if turn.new_segment:
            self.history.start_segment(turn.context)
        else:
            self.history.extend_to(turn.context)
        self.messages = list(turn.messages)
        self.tools = turn.tools
        self.pending = candidates
        self.pending_turn = turn
        self.stats["requests"] += 1

    def _record_sampled(self, candidate: Candidate) -> None:
        completion, cut = candidate.completion, candidate.cut
        self.history.record_turn(
            completion.token_ids[:cut], completion.logprobs[:cut], completion.token_versions()[:cut]
        )
        traj = self.trajectory
        traj.tool_call_count += len(candidate.message.get("tool_calls") or [])  # the policy's
        self.messages.append(candidate.message)
        self.pending = []

    def finish(self, status: Status = Status.OK) -> Trajectory:
        """Close the recording: the last request's first choice ends the trajectory."""
        if self.pending:
            self._record_sampled(self.pending[0])
        traj = self.trajectory
        traj.messages = [dict(m) for m in self.messages]
        traj.status = status
        traj.info["endpoint_requests"] = self.stats["requests"]
        traj.info["history_rewrites"] = self.stats["history_rewrites"]
        traj.timings["session_s"] = time.monotonic() - self.created
        return traj


def normalize_message(message: object) -> Message:
    """A message as plain data in one canonical shape, for rendering and comparison:
    content as a string (text parts joined, None -> ""), tool call arguments as compact JSON
    when they parse, and no fields the chat template does not read."""
    if not isinstance(message, dict):
        raise SessionError(400, f"a message must be an object, got {type(message).__name__}")
    role = message.get("role")
    out: Message = {"role": role, "content": _content_text(message.get("content"))}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": str(call.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(call["function"].get("name") or ""),
                    "arguments": _canonical_json(call["function"].get("arguments")),
                },
            }
            for call in message["tool_calls"]
        ]
    if role == "tool":
        out["tool_call_id"] = str(message.get("tool_call_id") or "")
        if message.get("name"):
            out["name"] = str(message["name"])
    if message.get("reasoning_content"):
        out["reasoning_content"] = str(message["reasoning_content"])
    return out


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)  # checked by the request schema


def _canonical_json(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return json.dumps(arguments)
    text = "" if arguments is None else str(arguments)
    try:
        return json.dumps(json.loads(text))
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the stack
        return text  # malformed arguments stay as the model wrote them


class SessionStore:
    """Session credentials: unguessable keys mapped to live sessions; a closed or expired key
    is unknown (401)."""

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self.ttl_s = ttl_s
        self._by_key: dict[str, Session] = {}

    def open(
        self, task_id: str = "task", group_id: str | None = None, recording: bool = True
    ) -> Session:
        """A new session with a fresh key (`secrets.token_urlsafe`, 256 bits)."""
        key = "fa-" + secrets.token_urlsafe(32)
        sid = uuid.uuid4().hex[:16]
        traj = Trajectory(task_id=task_id, group_id=group_id or sid)
        session = Session(key=key, session_id=sid, trajectory=traj, recording=recording)
        self._by_key[key] = session
        return session

    def ephemeral(self) -> Session:
        """A session for one request that records nothing and has no key (serving)."""
        sid = uuid.uuid4().hex[:16]
        traj = Trajectory(task_id="serve", group_id=sid)
        return Session(key="", session_id=sid, trajectory=traj, recording=False)

    def get(self, key: str | None) -> Session | None:
        """The live session of `key`, or None for an unknown, closed or expired key."""
        session = self._by_key.get(key or "")
        if session is not None and time.monotonic() - session.created > self.ttl_s:
            del self._by_key[session.key]
            return None
        return session

    def close(self, key: str, status: Status = Status.OK) -> Trajectory:
        """End the session (its key stops working) and return its trajectory."""
        session = self._by_key.pop(key, None)
        if session is None:
            raise KeyError(f"no open session with key {key[:6]}...")
        return session.finish(status)

    def __len__(self) -> int:
        return len(self._by_key)

"""The OpenAI-compatible HTTP app: `POST /v1/chat/completions` and `GET /v1/models`.

One request:

    Authorization: Bearer <session key> -> the session (401 if unknown, closed or expired)
    JSON body -> ChatCompletionRequest (400 naming the field)
    session.plan(messages, tools) -> prompt ids (bridged append-only, or a new segment)
    n x generate(prompt ids, sampling, session id) -> completions (503 if the generator fails)
    renderer.parse -> assistant messages with tool_calls -> session.commit -> JSON or SSE

The completion is sampled whole before the response starts, so a failed request answers
with its status code and records nothing; `stream=true` then sends it as OpenAI's
`chat.completion.chunk` events (role, content, tool calls, finish reason, usage, `[DONE]`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from forge_agent.endpoint.config import EndpointConfig
from forge_agent.endpoint.schema import ChatCompletionRequest, field_name
from forge_agent.endpoint.session import (
    Candidate,
    Session,
    SessionError,
    SessionStore,
    normalize_message,
)
from forge_agent.generator.config import GenerateFn, SamplingConfig
from forge_agent.observability import metrics
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Completion


class Endpoint:
    """The request handling behind the HTTP routes (usable without HTTP in tests)."""

    def __init__(
        self,
        generate: GenerateFn,
        renderer: ChatRenderer,
        max_model_len: int,
        config: EndpointConfig | None = None,
    ) -> None:
        self.generate = generate
        self.renderer = renderer
        self.max_model_len = max_model_len
        self.config = config or EndpointConfig()
        self.sessions = SessionStore(self.config.session_ttl_s)
        self.stats: dict[str, int] = {"requests": 0, "errors": 0, "history_rewrites": 0}

    # ------------------------------------------------------------------ auth
    def authenticate(self, authorization: str | None) -> Session:
        """The session of an ``Authorization: Bearer <key>`` header (401 otherwise)."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme != "Bearer":
            raise SessionError(
                401, "give the key as 'Authorization: Bearer <key>' (the bearer scheme)"
            )
        key = key.strip()
        session = self.sessions.get(key)
        if session is not None:
            return session
        if self.config.api_key and key == self.config.api_key:
            return self.sessions.ephemeral()
        raise SessionError(401, "unknown or expired session key (give it as the api_key)")

    # ------------------------------------------------------------------ one request
    async def complete(self, session: Session, body: bytes) -> tuple[dict[str, Any], Any]:
        """Sample the request's choices and record them; returns (response, request)."""
        request = _parse(body)
        messages, tools = request.plain_messages(), request.plain_tools()
        async with session.lock:
            try:
                turn = session.plan(self.renderer, messages, tools)
            except Exception as exc:  # the renderer refused the conversation
                msg = f"messages could not be rendered: {exc}"
                raise SessionError(400, msg, "messages") from exc
            if len(turn.context) >= self.max_model_len:
                raise SessionError(
                    400,
                    f"messages: the prompt has {len(turn.context)} tokens; the context holds "
                    f"{self.max_model_len} (max_model_len)",
                    "messages",
                )
            sampling = self._sampling(request, len(turn.context))
            if session.temperature is not None:
                sampling.temperature = session.temperature
            completions = await self._sample(turn.context, sampling, request, session)
            call_base = f"call_{session.stats['requests']}"
            candidates = [
                self._candidate(c, request, turn.context, tools, f"{call_base}_{i}")
                for i, c in enumerate(completions)
            ]
            if session.recording:
                rewrites = session.stats["history_rewrites"]
                session.commit(turn, candidates)
                if session.stats["history_rewrites"] > rewrites:
                    self.stats["history_rewrites"] += 1
                    metrics.record("endpoint/history_rewrites", 1, "sum")
        self.stats["requests"] += 1
        return self._response(request, turn.context, candidates), request

    def _sampling(self, request: ChatCompletionRequest, prompt_len: int) -> SamplingConfig:
        asked = request.max_completion_tokens or request.max_tokens
        field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        if asked is not None and asked >= self.max_model_len:
            raise SessionError(
                400,
                f"{field}={asked} does not fit the context of {self.max_model_len} tokens",
                field,
            )
        room = self.max_model_len - prompt_len
        return SamplingConfig(
            max_tokens=min(asked or self.config.default_max_tokens, room),
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            stop_token_ids=list(self.renderer.stop_token_ids),
            seed=request.seed,
        )

    async def _sample(
        self,
        context: list[int],
        sampling: SamplingConfig,
        request: ChatCompletionRequest,
        session: Session,
    ) -> list[Completion]:
        def seeded(i: int) -> SamplingConfig:
            if sampling.seed is None:
                return sampling
            return SamplingConfig(**{**sampling.__dict__, "seed": sampling.seed + i})

        session.sampling += 1
        try:
            completions = await asyncio.gather(
                *(
                    self.generate(list(context), seeded(i), session.session_id)
                    for i in range(request.n)
                )
            )
        except Exception as exc:
            metrics.record("endpoint/generator_errors", 1, "sum")
            raise SessionError(503, f"the generator failed: {exc}") from exc
        finally:
            session.sampling -= 1
        if any(c.finish_reason == "abort" for c in completions):
            raise SessionError(503, "the generator aborted the request (weights were updating)")
        return list(completions)

    def _candidate(
        self,
        completion: Completion,
        request: ChatCompletionRequest,
        context: list[int],
        tools: list[dict[str, Any]] | None,
        call_prefix: str,
    ) -> Candidate:
        ids = completion.token_ids
        cut, stop_hit = self._cut_at_stop(ids, request.stop_strings())
        message = self.renderer.parse(ids[:cut], tools, context, call_prefix=call_prefix)
        if stop_hit is not None:
            content = message.get("content") or ""
            message["content"] = (
                content[: content.find(stop_hit)] if stop_hit in content else content
            )
        if request.tool_choice == "none" and message.get("tool_calls"):
            text = self.renderer.tokenizer.decode(self._visible(ids[:cut]))
            message = {"role": "assistant", "content": text}
        finish = completion.finish_reason
        if stop_hit is not None:
            finish = "stop"
        if message.get("tool_calls"):
            finish = "tool_calls"
        message.setdefault("content", "")
        return Candidate(completion, normalize_message(message), cut, finish)

    def _visible(self, ids: list[int]) -> list[int]:
        stops = set(self.renderer.stop_token_ids)
        return [t for t in ids if t not in stops]

    def _cut_at_stop(self, ids: list[int], stops: list[str]) -> tuple[int, str | None]:
        """How many sampled tokens to keep so the text ends at the first stop string (the
        sampler ran on; the tokens after the one completing the stop string are dropped).

        The shortest prefix whose text holds a stop string is found by bisection over the
        prefix length (a longer prefix's text extends a shorter one's), so a cut costs
        O(log n) decodes, not the n decodes of trying each prefix (2,000 tokens x n=16
        took 5.2 s that way, on the event loop).
        """
        if not stops:
            return len(ids), None
        decode = self.renderer.tokenizer.decode

        def first_stop(k: int) -> str | None:
            text = decode(ids[:k])
            found = [(text.find(s), s) for s in stops if s in text]
            return min(found)[1] if found else None

        if first_stop(len(ids)) is None:
            return len(ids), None
        low, high = 0, len(ids)  # no stop in ids[:low] (or low == 0); a stop in ids[:high]
        while high - low > 1:
            middle = (low + high) // 2
            if first_stop(middle) is None:
                low = middle
            else:
                high = middle
        return high, first_stop(high)

    # ------------------------------------------------------------------ responses
    def _response(
        self, request: ChatCompletionRequest, context: list[int], candidates: list[Candidate]
    ) -> dict[str, Any]:
        choices = []
        for i, cand in enumerate(candidates):
            choice: dict[str, Any] = {
                "index": i,
                "message": _wire_message(cand.message),
                "finish_reason": cand.finish_reason,
                "logprobs": self._logprobs(cand) if request.logprobs else None,
            }
            choices.append(choice)
        completion_tokens = sum(c.cut for c in candidates)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or self.config.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(context),
                "completion_tokens": completion_tokens,
                "total_tokens": len(context) + completion_tokens,
            },
        }

    def _logprobs(self, cand: Candidate) -> dict[str, Any]:
        decode = self.renderer.tokenizer.decode
        content = []
        for tok, lp in zip(
            cand.completion.token_ids[: cand.cut], cand.completion.logprobs, strict=False
        ):
            text = decode([tok])
            content.append(
                {"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []}
            )
        return {"content": content, "refusal": None}

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.config.model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "forge-agent",
                }
            ],
        }


def sse_chunks(response: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A finished chat completion as OpenAI's streaming events."""

    async def events() -> AsyncIterator[bytes]:
        base = {k: response[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode()

        for choice in response["choices"]:
            i, msg = choice["index"], choice["message"]
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}}])
            if msg.get("content"):
                delta = {"index": i, "delta": {"content": msg["content"]}}
                if choice["logprobs"] is not None:
                    delta["logprobs"] = choice["logprobs"]
                yield chunk([delta])
            for j, call in enumerate(msg.get("tool_calls") or []):
                tool_delta = {"index": j, **call}
                yield chunk([{"index": i, "delta": {"tool_calls": [tool_delta]}}])
            yield chunk([{"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}])
        if include_usage:
            yield chunk([], usage=response["usage"])
        yield b"data: [DONE]\n\n"

    return events()


def error_body(exc: SessionError) -> dict[str, Any]:
    """OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""
    kind = {401: "authentication_error", 503: "server_error"}.get(exc.status)
    code = {
        401: "invalid_api_key",
        404: "not_found",
        405: "method_not_allowed",
        413: "request_too_large",
        503: "generator_unavailable",
    }.get(exc.status)
    return {
        "error": {
            "message": exc.message,
            "type": kind or "invalid_request_error",
            "param": exc.param,
            "code": code,
        }
    }


MAX_JSON_DEPTH = 64
"""The deepest nesting a request may have (a tool's JSON schema included)."""


def _parse(body: bytes) -> ChatCompletionRequest:
    try:
        data = json.loads(body)
    except RecursionError:
        raise SessionError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise SessionError(400, f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SessionError(400, "the body must be a JSON object")
    _check_plain(data)
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = field_name(tuple(err["loc"]))
        raise SessionError(400, f"{name}: {err['msg']}", name) from exc


def _check_plain(data: dict[str, Any]) -> None:
    """Refuse (400 naming the field) nesting past `MAX_JSON_DEPTH` and text that is not
    valid Unicode (a lone surrogate such as ``"\\ud800"``, which no response could echo).
    Walks the body without recursion, once."""
    todo: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        if len(path) > MAX_JSON_DEPTH:
            name = field_name(path[:8])
            raise SessionError(400, f"{name}: nests deeper than {MAX_JSON_DEPTH} levels", name)
        if isinstance(value, dict):
            for key, item in value.items():
                if not _valid_text(key):
                    name = field_name(path) if path else "body"
                    raise SessionError(400, f"{name}: a key is not valid Unicode text", name)
                todo.append((item, (*path, key)))
        elif isinstance(value, list):
            todo.extend((item, (*path, i)) for i, item in enumerate(value))
        elif isinstance(value, str) and not _valid_text(value):
            name = field_name(path)
            raise SessionError(
                400, f"{name}: not valid Unicode text (a lone surrogate escape?)", name
            )


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    else:
        out["content"] = message.get("content") or ""
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    return out

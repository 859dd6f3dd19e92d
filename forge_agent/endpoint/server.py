"""The endpoint as an ASGI app (Starlette) served by uvicorn inside the caller's event loop.

    server = EndpointServer(generate, renderer, max_model_len)
    await server.start()                      # binds 127.0.0.1 on a free port
    session = server.open_session(task_id)    # session.key is the client's api_key
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=session.key)
    ...                                       # the agent program talks to the policy
    trajectory = server.close_session(session.key)
    await server.stop()

The embedded server leaves signal handling to its host program (the trainer installs its own).
The app is plain Starlette (FastAPI's base) with two routes: the request body is validated
once, by the endpoint's own pydantic model, and nothing else runs per request (no dependency
injection or response model), since these calls share the event loop of the generator calls.
"""

from __future__ import annotations

import asyncio
import contextlib

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from forge_agent.endpoint.app import Endpoint, error_body, sse_chunks
from forge_agent.endpoint.config import EndpointConfig
from forge_agent.endpoint.session import Session, SessionError
from forge_agent.generator.config import GenerateFn
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Status, Trajectory


def create_app(endpoint: Endpoint) -> Starlette:
    """The HTTP routes over `endpoint`: `POST /v1/chat/completions`, `GET /v1/models`."""

    def refused(exc: SessionError) -> Response:
        endpoint.stats["errors"] += 1
        return JSONResponse(error_body(exc), status_code=exc.status)

    async def chat_completions(request: Request) -> Response:
        try:
            session = endpoint.authenticate(request.headers.get("authorization"))
            body = await _bounded_body(request, endpoint.config.max_body_bytes)
            response, parsed = await endpoint.complete(session, body)
        except SessionError as exc:
            return refused(exc)
        if not parsed.stream:
            return JSONResponse(response)
        usage = parsed.stream_options is not None and parsed.stream_options.include_usage
        return StreamingResponse(sse_chunks(response, usage), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        try:
            endpoint.authenticate(request.headers.get("authorization"))
        except SessionError as exc:
            return refused(exc)
        return JSONResponse(endpoint.models())

    async def no_route(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return refused(
            SessionError(
                status,
                f"no route {request.method} {request.url.path}; the endpoint serves "
                "POST /v1/chat/completions and GET /v1/models",
            )
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ],
        exception_handlers={404: no_route, 405: no_route},
    )


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past `limit` bytes (read no further)."""
    too_large = SessionError(
        413, f"the request body is larger than {limit} bytes (EndpointConfig.max_body_bytes)"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the host program owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class EndpointServer:
    """An `Endpoint` listening on HTTP, with session keys handed out per episode."""

    def __init__(
        self,
        generate: GenerateFn,
        renderer: ChatRenderer,
        max_model_len: int,
        config: EndpointConfig | None = None,
    ) -> None:
        self.endpoint = Endpoint(generate, renderer, max_model_len, config)
        self.config = self.endpoint.config
        self.app = create_app(self.endpoint)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as `base_url`."""
        host = self.config.host if self.config.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}/v1"

    async def start(self) -> None:
        """Bind and start serving in this event loop."""
        config = uvicorn.Config(
            self.app,
            host=self.config.host,
            port=self.config.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=self.config.keep_alive_s,
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the bind error
                raise RuntimeError(f"endpoint did not start on {self.config.host}")
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None

    async def __aenter__(self) -> EndpointServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def open_session(self, task_id: str = "task", group_id: str | None = None) -> Session:
        """A new episode's session; its `key` is the credential for its requests."""
        return self.endpoint.sessions.open(task_id, group_id)

    def close_session(self, key: str, status: Status = Status.OK) -> Trajectory:
        """End a session (its key stops working) and return the recorded trajectory."""
        return self.endpoint.sessions.close(key, status)

"""The endpoint's config: `EndpointConfig`, how the OpenAI-compatible endpoint listens and
answers (`forge_agent.endpoint.app`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EndpointConfig:
    """How the endpoint listens and answers.

    `api_key`: a static key that serves requests without a session (nothing is recorded;
    `apps.serve` uses it). Session keys always work.
    """

    host: str = "127.0.0.1"  # loopback: agent programs run on this host
    port: int = 0  # 0 picks a free port
    model_name: str = "forge-agent-policy"
    default_max_tokens: int = 256
    session_ttl_s: float = 3600.0
    api_key: str | None = None
    # how long an idle connection stays open: env workers keep theirs between episodes
    keep_alive_s: float = 60.0
    # the largest request body (413 beyond): parsing and rendering run on the event loop the
    # generator calls share, so one huge request must not stall the others
    max_body_bytes: int = 2 << 20

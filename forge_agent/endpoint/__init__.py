"""An OpenAI-compatible Chat Completions endpoint in front of the generator.

Any agent program written against the `openai` client talks to the policy through it; each
episode has its own session key, and its requests are recorded token-exactly (append-only
rendering, sampled tokens never re-tokenized) as one `Trajectory`.
"""

from forge_agent.endpoint.app import Endpoint
from forge_agent.endpoint.config import EndpointConfig
from forge_agent.endpoint.server import EndpointServer, create_app
from forge_agent.endpoint.session import Session, SessionError, SessionStore

__all__ = [
    "Endpoint",
    "EndpointConfig",
    "EndpointServer",
    "Session",
    "SessionError",
    "SessionStore",
    "create_app",
]

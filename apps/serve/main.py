"""Serve a policy checkpoint behind the OpenAI-compatible endpoint.

    python -m apps.serve --model runs/default/checkpoints/step_40 [--port 8000] [--api-key KEY]

Point any OpenAI-compatible tool at it (`base_url=http://127.0.0.1:8000/v1`, the printed key):

    curl http://127.0.0.1:8000/v1/chat/completions -H "Authorization: Bearer $KEY" \\
        -H "Content-Type: application/json" -d '{"messages": [{"role": "user", "content": "hi"}]}'

Requests are stateless here (each is rendered in full and nothing is recorded); training runs
use per-episode session keys instead. Binds loopback unless `--host` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets

import uvicorn

from forge_agent.endpoint import Endpoint, EndpointConfig, create_app
from forge_agent.generator import GeneratorConfig, VLLMEngine
from forge_agent.rollout import ChatRenderer


async def serve(args: argparse.Namespace) -> None:
    from forge_agent.models.tiny import load_tokenizer

    engine = VLLMEngine(GeneratorConfig(max_model_len=args.max_model_len), args.model)
    await engine.start()
    try:
        config = EndpointConfig(
            host=args.host, port=args.port, model_name=args.served_name, api_key=args.api_key
        )
        endpoint = Endpoint(
            engine.generate, ChatRenderer(load_tokenizer(args.model)), engine.max_model_len, config
        )
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(endpoint), host=args.host, port=args.port, log_level="warning"
            )
        )
        print(
            f"serving {args.model} at http://{args.host}:{args.port}/v1 "
            f"(model {args.served_name!r}, api key {args.api_key})",
            flush=True,
        )
        await server.serve()
    finally:
        await engine.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder or hub name")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key", default=None, help="the key clients must send (default: a random one)"
    )
    parser.add_argument("--served-name", default="forge-agent-policy", help="the model's id")
    parser.add_argument("--max-model-len", type=int, default=2048)
    args = parser.parse_args(argv)
    args.api_key = args.api_key or "fa-" + secrets.token_urlsafe(24)
    asyncio.run(serve(args))

"""Serve a policy checkpoint behind the OpenAI-compatible endpoint.

    python -m apps.serve --model runs/default/checkpoints/step_000040/policy [--port 8000] \\
        [--api-key KEY]

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
import sys


async def serve(args: argparse.Namespace) -> None:
    """Start the engine on `args.model` and serve it until stopped."""
    import uvicorn

    from forge_agent.endpoint import Endpoint, create_app
    from forge_agent.endpoint.config import EndpointConfig
    from forge_agent.generator import GeneratorConfig, VLLMEngine
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer

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


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve; a missing model is one line and exit status 2."""
    from forge_agent.errors import SetupError, report_setup_error
    from forge_agent.models.hub import resolve_model

    parser = argparse.ArgumentParser(
        prog="python -m apps.serve", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model",
        required=True,
        help="a model folder (a run's checkpoints/step_NNNNNN/policy) or a cached hub name",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key", default=None, help="the key clients must send (default: a random one)"
    )
    parser.add_argument("--served-name", default="forge-agent-policy", help="the model's id")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--verbose", action="store_true", help="tracebacks of setup errors")
    args = parser.parse_args(argv)
    try:
        args.model = str(resolve_model(args.model, key="--model"))
    except SetupError as exc:
        return report_setup_error(exc, args.verbose)
    args.api_key = args.api_key or "fa-" + secrets.token_urlsafe(24)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

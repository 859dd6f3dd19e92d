"""Render a trace JSONL file (written by `forge_agent.observability.traces.TraceWriter`) as one
HTML page.

Usage: python -m apps.traces runs/traces.jsonl [--out page.html] [--tokenizer PATH] [--last N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from forge_agent.observability.trace_html import load_token_decoder, write_html
from forge_agent.observability.traces import read_traces


def main(argv: list[str] | None = None) -> Path:
    """Parse arguments, write the page, print its path and return it."""
    parser = argparse.ArgumentParser(
        prog="python -m apps.traces",
        description=" ".join(__doc__.split("\n\n")[0].split()),  # the whole first paragraph
    )
    parser.add_argument("traces", type=Path, help="trace JSONL file")
    parser.add_argument("--out", type=Path, help="HTML page to write (default: <traces>.html)")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer for the per-token view: a folder, a tokenizer.json, or 'bytes'",
    )
    parser.add_argument("--last", type=int, help="only the last N episodes")
    args = parser.parse_args(argv)

    records = read_traces(args.traces, last=args.last)
    decode = load_token_decoder(args.tokenizer) if args.tokenizer else None
    out = args.out or args.traces.with_suffix(".html")
    write_html(records, out, decode=decode, title=f"traces: {args.traces.name}")
    print(f"wrote {out} ({len(records)} episodes)")
    return out


if __name__ == "__main__":
    main()

"""Per-execution latency of the sandbox backends, side by side in one run.

Rows: bare ``/usr/bin/python3 -c`` subprocess (the baseline), bubblewrap cold (a fresh sandbox
per run), bubblewrap warm (one session, a fork of its supervisor per run), Docker cold
(``docker run``) and Docker warm (``docker exec`` into the session's container). Docker rows are
marked skipped, with the reason, where no engine can be started. Each row runs the same
``print(1)`` snippet; the table shows p50/p95 in milliseconds and p50 as a ratio to the baseline.

The MCP rows time one tool call through a `ToolSet`, side by side: a direct Python tool running
an SQLite query in-process (their baseline), and the same query through `read_query` of the real
mcp-server-sqlite kept warm in a bubblewrap session (its ratio is to the Python tool).

    python -m apps.bench.sandbox --n 30 --out bench_results/sandbox.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_agent.sandbox import Limits, make_sandbox

CODE = "print(1)"


def _measure(fn: Callable[[], Any], n: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(name: str, samples: list[float]) -> dict[str, Any]:
    return {
        "name": name,
        "n": len(samples),
        "p50_ms": 1e3 * statistics.median(samples),
        "p95_ms": 1e3 * _percentile(samples, 0.95),
        "mean_ms": 1e3 * statistics.fmean(samples),
    }


def _checked(result: Any) -> None:
    if result.stdout != "1\n":
        raise RuntimeError(f"benchmark run failed: {result}")


def bench_bare(n: int) -> dict[str, Any]:
    def run() -> None:
        out = subprocess.run(["/usr/bin/python3", "-c", CODE], capture_output=True, check=True)
        assert out.stdout == b"1\n"

    return _row("bare python3 -c", _measure(run, n))


def bench_bwrap(n: int) -> list[dict[str, Any]]:
    rows = []
    limits = Limits()
    for use_cgroups, label in ((None, ""), (False, " (rlimits only)")):
        sandbox = make_sandbox("bwrap", use_cgroups=use_cgroups)
        cold = _measure(lambda sb=sandbox: _checked(sb.run(code=CODE)), n)
        rows.append(_row(f"bwrap cold{label}", cold))
        with sandbox.session(limits) as session:
            rows.append(
                _row(f"bwrap warm{label}", _measure(lambda: _checked(session.run(code=CODE)), n))
            )
    return rows


def bench_docker(n: int) -> list[dict[str, Any]]:
    names = ("docker cold (docker run)", "docker warm (exec)")
    try:
        import docker

        from forge_agent.sandbox.docker_local import LocalDockerd, build_python_image

        engine = LocalDockerd().start()
    except Exception as exc:
        reason = f"dockerd could not start: {exc}"
        return [{"name": name, "skipped": reason} for name in names]
    try:
        build_python_image(docker.DockerClient(base_url=engine.base_url))
        sandbox = make_sandbox("docker", base_url=engine.base_url)
        cold = _measure(lambda: _checked(sandbox.run(code=CODE)), max(3, n // 3), warmup=1)
        with sandbox.session() as session:
            warm = _measure(lambda: _checked(session.run(code=CODE)), n)
        return [_row(names[0], cold), _row(names[1], warm)]
    finally:
        engine.stop()


MCP_QUERY = "SELECT SUM(units) AS s FROM sales"


def bench_mcp(n: int) -> list[dict[str, Any]]:
    """A direct Python tool vs an MCP tool of a warm sandboxed server, both through a ToolSet."""
    import asyncio
    import sqlite3
    import tempfile

    from forge_agent.toolkit.mcp import MCP_HOME, MCPConnection, MCPServerConfig
    from forge_agent.toolkit.toolset import ToolSet

    names = ("python tool (ToolSet, direct)", "mcp tool (ToolSet, warm bwrap)")
    server = f"{MCP_HOME}/bin/mcp-server-sqlite"
    if not os.path.exists(server):
        return [
            {"name": name, "skipped": f"{server} missing (run scripts/setup.sh)"} for name in names
        ]
    rows = [("Oslo", "tea", 3), ("Lima", "rice", 4)]
    host_dir = tempfile.mkdtemp(prefix="forge-bench-mcp-")
    host_db = os.path.join(host_dir, "task.db")
    with sqlite3.connect(host_db) as db:
        db.execute("CREATE TABLE sales(city TEXT, product TEXT, units INTEGER)")
        db.executemany("INSERT INTO sales VALUES (?, ?, ?)", rows)
    with open(host_db, "rb") as f:
        db_bytes = f.read()

    def read_query(query: str) -> str:
        """Run a SELECT on the database (the direct Python tool)."""
        db = sqlite3.connect(host_db)
        db.row_factory = sqlite3.Row
        try:
            return str([dict(r) for r in db.execute(query).fetchall()])
        finally:
            db.close()

    call = {"function": {"name": "read_query", "arguments": {"query": MCP_QUERY}}}

    def timed(toolset: ToolSet) -> list[float]:
        async def go() -> list[float]:
            async def once() -> None:
                out = (await toolset.call(call))["content"]
                if out != "[{'s': 7}]":
                    raise RuntimeError(f"benchmark call failed: {out}")

            for _ in range(3):
                await once()
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                await once()
                samples.append(time.perf_counter() - start)
            return samples

        return asyncio.run(go())

    direct = _row(names[0], timed(ToolSet([read_query])))
    sandbox = make_sandbox("bwrap", ro_binds=[MCP_HOME])
    with sandbox.session() as session:
        session.write_file("task.db", db_bytes)
        config = MCPServerConfig("sqlite", command=(server, "--db-path", "/workspace/task.db"))
        conn = MCPConnection(config, session).start()
        try:
            mcp = _row(names[1], timed(ToolSet(conn.tools(), sandbox=session)))
        finally:
            conn.close()
    mcp["ratio_p50_to_python_tool"] = mcp["p50_ms"] / direct["p50_ms"]
    return [direct, mcp]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=30, help="iterations per row")
    parser.add_argument("--out", default="bench_results/sandbox.json", help="JSON output path")
    parser.add_argument("--no-docker", action="store_true", help="skip the Docker rows")
    args = parser.parse_args(argv)

    rows = [bench_bare(args.n), *bench_bwrap(args.n)]
    if args.no_docker:
        rows += [{"name": "docker", "skipped": "--no-docker"}]
    else:
        rows += bench_docker(args.n)
    rows += bench_mcp(args.n)
    base = rows[0]["p50_ms"]
    for row in rows:
        if "p50_ms" in row:
            row["ratio_p50_to_bare"] = row["p50_ms"] / base

    print(f"{'runner':<32}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'p50 / bare':>12}")
    for row in rows:
        if "skipped" in row:
            print(f"{row['name']:<32}  skipped: {row['skipped']}")
        else:
            print(
                f"{row['name']:<32}{row['n']:>5}{row['p50_ms']:>10.1f}{row['p95_ms']:>10.1f}"
                f"{row['ratio_p50_to_bare']:>12.2f}"
            )
    for row in rows:
        if "ratio_p50_to_python_tool" in row:
            print(f"{row['name']}: p50 {row['ratio_p50_to_python_tool']:.1f}x the python tool's")
    report = {"benchmark": "sandbox", "code": CODE, "cpus": os.cpu_count(), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()

"""Does each documented training command learn, with the env's own reward, on the CPU default?

Runs each command of the README and docs as a user types it (as a child process, with its
warm start, which is cached after the first run) and reads the run's own `summary.json`:
held-out reward from the project's evaluator (tasks the policy never trained on) at step 0,
after the warm start and before RL, and at every later eval. No reward is added: each env
scores its own outcome.

    calculator             python -m apps.agent.main
    calculator_curriculum  --config apps/agent/calculator_curriculum.yaml (held out: difficulty 2)
    frozen_lake            --config apps/agent/frozen_lake.yaml
    multihop               --config apps/agent/multihop.yaml
    blackjack              env.id=blackjack env.kwargs={}
    reasoning_gym          env.id=reasoning_gym:basic_arithmetic (docs/envs.md's command)
    sql_mcp                --config apps/agent/sql_mcp.yaml (turns long enough for a query)
    openenv_url            env.id=http://127.0.0.1:PORT env.kwargs={} (the calculator's OpenEnv
                           server, `python -m envs.calculator.server`, started here)
    docs_user_env          env.id=my_envs.reverse:ReverseEnv env.kwargs={} (docs/envs.md's file)
    docs_agent_program     env.id=agent:my_agents.calc:agent ... (docs/agents.md's program)

Prints a table (held-out at step 0, at the end and the best; RL seconds, evals excluded),
writes bench_results/learns.json and a plot of held-out reward against step.

    python -m apps.bench.learns                                   # every command
    python -m apps.bench.learns --runs blackjack sql_mcp -- training.steps=20
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.bench.util import new_figure, print_table, run_agent, save_figure, write_json

REPO = Path(__file__).resolve().parents[2]

RUNS: dict[str, list[str]] = {
    "calculator": [],
    "calculator_curriculum": ["--config", "apps/agent/calculator_curriculum.yaml"],
    "frozen_lake": ["--config", "apps/agent/frozen_lake.yaml"],
    "multihop": ["--config", "apps/agent/multihop.yaml"],
    "blackjack": ["env.id=blackjack", "env.kwargs={}"],
    "reasoning_gym": [  # docs/envs.md's command; its judge runs sandboxed (docs/rewards.md)
        "env.id=reasoning_gym:basic_arithmetic",
        "env.kwargs={max_terms: 3, max_digits: 2, tools: [tools.calculator:calculator]}",
    ],
    "sql_mcp": ["--config", "apps/agent/sql_mcp.yaml"],
    "openenv_url": ["env.id={url}", "env.kwargs={}"],
    "docs_user_env": ["env.id=my_envs.reverse:ReverseEnv", "env.kwargs={}"],
    "docs_agent_program": [
        "env.id=agent:my_agents.calc:agent",
        "env.kwargs={reward: 'my_agents.calc:reward', tasks_from: calculator}",
    ],
}
DOCS_PACKAGES = {  # run name -> (docs page, module file its first python block is written to)
    "docs_user_env": ("docs/envs.md", "my_envs/reverse.py"),
    "docs_agent_program": ("docs/agents.md", "my_agents/calc.py"),
}


def docs_package(page: str, module: str, root: Path) -> Path:
    """The first python block of a docs page, written as `module` under `root`."""
    text = (REPO / page).read_text()
    block = re.search(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    if block is None:
        raise SystemExit(f"{page} has no python block")
    path = root / module
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "__init__.py").write_text("")
    path.write_text(block.group(1))
    return root


@contextlib.contextmanager
def openenv_server(log: Path) -> Iterator[str]:
    """The calculator's OpenEnv server (`python -m envs.calculator.server`) on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("w") as fh:
        server = subprocess.Popen(
            [sys.executable, "-m", "envs.calculator.server", "--port", str(port)],
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the OpenEnv server did not start: see {log}") from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_named(name: str, overrides: list[str], tmp: Path) -> dict[str, Any]:
    """One documented command, with `overrides` appended."""
    out = tmp / name
    args, env = list(RUNS[name]), {}
    if name in DOCS_PACKAGES:
        env["PYTHONPATH"] = str(docs_package(*DOCS_PACKAGES[name], tmp / f"{name}-pkg"))
    if name == "openenv_url":
        with openenv_server(tmp / "openenv-server.log") as url:
            args = [a.replace("{url}", url) for a in args]
            return {"run": name, "args": args, **run_agent([*args, *overrides], out, REPO, env)}
    return {"run": name, "args": args, **run_agent([*args, *overrides], out, REPO, env)}


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    if "evals" not in row:
        return {"run": row["run"], "start": None, "note": f"rc {row['rc']}: see JSON"}
    evals = row["evals"]
    return {
        "run": row["run"],
        "start": evals[0]["success"],
        "final": evals[-1]["success"],
        "best": max(e["success"] for e in evals),
        "gain": evals[-1]["success"] - evals[0]["success"],
        "steps": evals[-1]["step"],
        "train_s": row.get("train_loop_s") or 0.0,
        "note": "",
    }


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Held-out reward against step, one line per command."""
    fig = new_figure(7, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    for row in rows:
        if "evals" in row:
            steps = [e["step"] for e in row["evals"]]
            ax.plot(steps, [e["success"] for e in row["evals"]], marker="o", label=row["run"])
    ax.set_xlabel("RL step (0: after the warm start)")
    ax.set_ylabel("held-out reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", default="bench_results/learns.json")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (after --)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="learns-") as tmp:
        for name in args.runs:
            print(f"[learns] {name} ...", flush=True)
            row = run_named(name, args.overrides, Path(tmp))
            summary = table_row(row)
            print(f"[learns]   {summary} in {row['run_s']:.0f} s", flush=True)
            rows.append(row)
    columns = [
        ("run", "command", "s"), ("start", "step 0", ".3f"), ("final", "final", ".3f"),
        ("best", "best", ".3f"), ("gain", "gain", "+.3f"), ("steps", "steps", "d"),
        ("train_s", "RL s", ".0f"), ("note", "", "s"),
    ]  # fmt: skip
    table_rows = [table_row(r) for r in rows]
    table = print_table(table_rows, columns)
    out = Path(args.out)
    write_json(out, {"overrides": args.overrides, "rows": rows, "table": table_rows})
    out.with_suffix(".txt").write_text(table + "\n")
    plot(rows, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

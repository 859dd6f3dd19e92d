"""Soak: many episodes through the real stack, watching every process for leaks.

A training run of the given config (default: the CPU default, evals off) sized to `--episodes`
episodes: the generator, env workers with their sandboxes, the reward actor and a trainer step
every `training.groups_per_step` groups. Every `--every` seconds it samples, for each process
of the run (the controller and everything under it, vLLM's engine processes included), the
resident memory (RSS) and open file descriptors, and counts the live sandboxes (bwrap
processes), sandbox workspaces and sandbox cgroups. After the run it counts what is left.

Prints a table per process role (start = after warm-up, middle, end) and writes
bench_results/soak.json. Targets: after warm-up, memory grows < 5% and descriptors not at all;
0 leaked processes, workspaces or cgroups at the end.

    python -m apps.bench.soak [--episodes 10000] [--every 5] [--warmup 0.1] [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import math
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

from apps.bench.util import machine_info, print_table, write_json
from forge_agent.run.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def role(p: psutil.Process) -> str:
    """A stable name for a process of the run (pids change across restarts, roles do not)."""
    try:
        name, cmd = p.name(), " ".join(p.cmdline())
    except psutil.Error:
        return "gone"
    if name.startswith("VLLM") or "EngineCore" in name:
        return f"vllm:{name}"
    if p.pid == os.getpid():
        return "controller"
    if "env.worker_process" in cmd or "forge_agent.env" in cmd:
        return "env_worker"
    if name == "bwrap" or "supervisor" in cmd:
        return "sandbox"
    if "monarch" in cmd or "process_allocator" in cmd or "bootstrap" in cmd:
        return "monarch_proc"
    return name


def run_processes() -> list[psutil.Process]:
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    vllm = [  # the engine core reparents itself away from the generator proc
        p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM")
    ]
    return list({p.pid: p for p in [*procs, *vllm]}.values())


def sandbox_counts() -> dict[str, int]:
    tmp = tempfile.gettempdir()
    return {
        "workspaces": len(glob.glob(os.path.join(tmp, "forge-ws-*"))),
        "cgroups": len(glob.glob("/sys/fs/cgroup/**/forge-sandbox-*", recursive=True)),
        "bwrap": sum(1 for p in psutil.process_iter(["name"]) if p.info["name"] == "bwrap"),
    }


def sample(episodes: int) -> dict[str, Any]:
    """RSS and descriptors summed per role, and the sandbox counts."""
    per_role: dict[str, dict[str, float]] = defaultdict(lambda: {"rss_mb": 0.0, "fds": 0, "n": 0})
    for p in run_processes():
        try:
            rss, fds = p.memory_info().rss, p.num_fds()
        except psutil.Error:
            continue
        r = per_role[role(p)]
        r["rss_mb"] += rss / 2**20
        r["fds"] += fds
        r["n"] += 1
    counts = sandbox_counts()
    return {"t": time.monotonic(), "episodes": episodes, "roles": dict(per_role), **counts}


async def soak(cfg: Any, every_s: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from forge_agent.run.controller import Controller

    controller = Controller(cfg)
    samples: list[dict[str, Any]] = []

    def episodes() -> int:
        return sum(v for k, v in controller.state.counts.items() if k.startswith("status/"))

    async def sampler() -> None:
        while True:
            samples.append(sample(episodes()))
            print(
                f"[soak] {samples[-1]['episodes']} episodes, "
                f"{sum(r['rss_mb'] for r in samples[-1]['roles'].values()):.0f} MB RSS",
                flush=True,
            )
            await asyncio.sleep(every_s)

    try:
        await controller.setup()
        task = asyncio.create_task(sampler())
        summary = await controller.run()
        task.cancel()
        samples.append(sample(episodes()))
    finally:
        await controller.shutdown()
    return summary, samples


def trend(samples: list[dict[str, Any]], warmup: float) -> list[dict[str, Any]]:
    """Per role: RSS and descriptors after warm-up, in the middle and at the end."""
    total = samples[-1]["episodes"] or 1
    steady = [s for s in samples if s["episodes"] >= warmup * total] or samples
    start, middle, end = steady[0], steady[len(steady) // 2], steady[-1]
    rows = []
    for name in sorted(end["roles"]):
        a, m, b = (s["roles"].get(name, {"rss_mb": 0.0, "fds": 0}) for s in (start, middle, end))
        rows.append(
            {
                "role": name,
                "procs": end["roles"][name]["n"],
                "rss_start_mb": a["rss_mb"],
                "rss_mid_mb": m["rss_mb"],
                "rss_end_mb": b["rss_mb"],
                "rss_growth_pct": 100 * (b["rss_mb"] / a["rss_mb"] - 1) if a["rss_mb"] else None,
                "fds_start": a["fds"],
                "fds_end": b["fds"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="a run YAML (default: the CPU default)")
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.1, help="fraction of episodes")
    parser.add_argument("--out", default=str(ROOT / "bench_results" / "soak.json"))
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args(argv)

    base = load_config(args.config, args.overrides)
    per_step = base.training.groups_per_step * base.training.group_size
    steps = math.ceil(args.episodes / per_step)
    with tempfile.TemporaryDirectory(prefix="forge-soak-") as out:
        cfg = load_config(
            args.config,
            [
                "eval.every=0",
                "checkpoint.every=0",
                "metrics.console=false",
                *args.overrides,
                f"training.steps={steps}",
                f"output_dir={out}",
            ],
        )
        before = sandbox_counts()
        started = time.monotonic()
        summary, samples = asyncio.run(soak(cfg, args.every))
        wall = time.monotonic() - started
    time.sleep(3)  # let reapers and janitors finish
    left = sandbox_counts()
    leaked_procs = [
        {"pid": p.pid, "role": role(p)}
        for p in run_processes()
        if p.pid != os.getpid() and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]
    rows = trend(samples, args.warmup)
    print_table(
        rows,
        [
            ("role", "process role", ""),
            ("procs", "procs", "d"),
            ("rss_start_mb", "RSS start MB", ".0f"),
            ("rss_mid_mb", "middle", ".0f"),
            ("rss_end_mb", "end", ".0f"),
            ("rss_growth_pct", "growth %", "+.1f"),
            ("fds_start", "fds start", "d"),
            ("fds_end", "fds end", "d"),
        ],
    )
    leaks = {
        "processes": leaked_procs,
        "workspaces": left["workspaces"] - before["workspaces"],
        "cgroups": left["cgroups"] - before["cgroups"],
        "bwrap": left["bwrap"] - before["bwrap"],
    }
    print(
        f"episodes {samples[-1]['episodes']} in {wall:.0f}s ({summary['steps']} trainer steps); "
        f"left after shutdown: {len(leaked_procs)} processes, {leaks['workspaces']} workspaces, "
        f"{leaks['cgroups']} cgroups, {leaks['bwrap']} sandboxes"
    )
    result = {
        "machine": machine_info(),
        "episodes": samples[-1]["episodes"],
        "wall_s": wall,
        "steps": summary["steps"],
        "trend": rows,
        "leaks": leaks,
        "samples": samples,
        "counts": summary["counts"],
    }
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()

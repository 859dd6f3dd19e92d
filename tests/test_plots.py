"""Training-curve PNGs from the metrics JSONL."""

from __future__ import annotations

import json
import math

import pytest
from PIL import Image

from apps.plots.__main__ import main as plots_main
from forge_agent.observability.metrics import JsonlSink
from forge_agent.observability.plots import (
    DEFAULT_PANELS,
    Panel,
    find_series,
    plot_curves,
    read_metrics,
)

ALL_SERIES = [
    "reward/mean",
    "eval/reward/mean",
    "episode/length",
    "tools/call_rate",
    "loss/kl",
    "loss/entropy",
    "policy/lag",
]


def write_metrics(path, names, steps=30):
    sink = JsonlSink(path)
    for step in range(steps):
        sink.write(step, {name: math.sin(step / 5 + i) for i, name in enumerate(names)})
    sink.close()
    return path


def assert_png(path, min_size=(600, 400)):
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.size[0] >= min_size[0] and img.size[1] >= min_size[1]
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 20


def test_png_has_the_seven_default_panels_filled_when_every_series_is_recorded(tmp_path):
    metrics = write_metrics(tmp_path / "m.jsonl", ALL_SERIES)

    used = plot_curves(metrics, tmp_path / "curves.png")

    assert list(used) == [
        "reward (training rollouts)",
        "held-out reward (eval)",
        "episode length (tokens)",
        "tool-call rate",
        "KL",
        "entropy",
        "policy lag",
    ]
    assert list(used.values()) == ALL_SERIES
    assert_png(tmp_path / "curves.png")


def test_missing_series_become_not_recorded_panels_instead_of_errors(tmp_path):
    metrics = write_metrics(tmp_path / "m.jsonl", ["reward/mean"])

    used = plot_curves(metrics, tmp_path / "curves.png")

    assert used["reward (training rollouts)"] == "reward/mean"
    assert [used[p.title] for p in DEFAULT_PANELS[1:]] == [None] * 6
    assert_png(tmp_path / "curves.png")


def test_an_empty_metrics_file_still_gives_a_png_of_not_recorded_panels(tmp_path):
    (tmp_path / "m.jsonl").write_text("")

    used = plot_curves(tmp_path / "m.jsonl", tmp_path / "curves.png")

    assert set(used.values()) == {None}
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_a_series_is_found_by_exact_name_first_then_by_name_suffix():
    series = {"trainer/kl": ([0], [1.0]), "kl": ([0], [2.0]), "a/entropy": ([0], [0.5])}

    assert find_series(series, ("loss/kl", "kl")) == "kl"
    assert find_series(series, ("loss/entropy", "entropy")) == "a/entropy"
    assert find_series(series, ("policy/lag",)) is None


def test_custom_panels_choose_what_is_drawn(tmp_path):
    metrics = write_metrics(tmp_path / "m.jsonl", ["throughput/tokens_per_s"])

    used = plot_curves(metrics, tmp_path / "c.png", panels=[Panel("throughput", ("tokens_per_s",))])

    assert used == {"throughput": "throughput/tokens_per_s"}
    assert_png(tmp_path / "c.png", min_size=(300, 200))


def test_read_metrics_keeps_steps_and_ignores_a_truncated_last_line(tmp_path):
    path = write_metrics(tmp_path / "m.jsonl", ["reward/mean"], steps=3)
    with path.open("a") as f:
        f.write('{"step": 3, "metr')

    series = read_metrics(path)

    assert series["reward/mean"][0] == [0, 1, 2]


def test_read_metrics_rejects_a_corrupt_line_in_the_middle(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("nope\n" + json.dumps({"step": 0, "metrics": {}}) + "\n")

    with pytest.raises(ValueError, match="line 1"):
        read_metrics(path)


def test_cli_writes_the_png_and_lists_the_panels(tmp_path, capsys):
    metrics = write_metrics(tmp_path / "m.jsonl", ["reward/mean", "loss/kl"])

    out = plots_main([str(metrics), "--out", str(tmp_path / "out" / "curves.png")])

    assert out == tmp_path / "out" / "curves.png"
    assert_png(out)
    printed = capsys.readouterr().out
    assert "loss/kl" in printed and "not recorded" in printed


def test_the_kl_panel_titles_the_sampler_mismatch_as_what_it_is():
    (kl_panel,) = [p for p in DEFAULT_PANELS if p.title == "KL"]
    mismatch = "train/sampler_ratio/mismatch_kl_k3"
    series = {mismatch: ([1, 2], [1e-9, -2e-10]), "reward/mean": ([1, 2], [0.1, 0.2])}
    name = find_series(series, kl_panel.candidates)
    assert name == mismatch
    assert "mismatch" in kl_panel.title_for(name) and "not a policy KL" in kl_panel.title_for(name)
    assert kl_panel.title_for("loss/kl") == "KL"  # the KL penalty's own curve keeps the title

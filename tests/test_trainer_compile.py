"""`trainer.compile`: decoder layers under torch.compile give the same train step as eager.

The suite traces with dynamo's "eager" backend (the graphs dynamo captures, run without code
generation: seconds, not the minutes inductor's CPU compile takes on 2 cores); the inductor
speed-up is measured on a GPU (docs/gpu.md, apps/bench/trainer_cuda.py)."""

from __future__ import annotations

import copy

import pytest
import torch


def test_compiled_layers_train_like_eager_layers():
    from apps.bench.train_step import mixed_trajectories
    from forge_agent.algorithms.losses import LossConfig
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model
    from forge_agent.trainer import Trainer, TrainerConfig

    vocab = 512
    trajs = mixed_trajectories(4, vocab)
    model = build_model(TinyModelConfig(hidden_size=64, num_layers=2, head_dim=16), vocab)
    results = []
    for backend in (None, "eager"):
        cfg = TrainerConfig(lr=1e-3, loss=LossConfig.preset("grpo"), compile=backend)
        trainer = Trainer(cfg, copy.deepcopy(model))
        compiled = [m for m in trainer.model.modules() if m._compiled_call_impl is not None]
        assert len(compiled) == (2 if backend else 0)  # both decoder layers, nothing else
        metrics = [trainer.train_step(trajs)]
        results.append((metrics, trainer.model.state_dict()))
    (m0, w0), (m1, w1) = results
    for a, b in zip(m0, m1, strict=True):
        assert b["loss/total"] == pytest.approx(a["loss/total"], rel=1e-5, abs=1e-7)
        assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-5)
    for k in w0:
        torch.testing.assert_close(w1[k], w0[k], rtol=0, atol=1e-6)


def test_compile_is_refused_with_the_titan_backend():
    from forge_agent.trainer import TrainerConfig

    with pytest.raises(ValueError, match="compile"):
        TrainerConfig(backend="titan", compile="inductor")

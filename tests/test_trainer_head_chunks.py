"""The LM head in chunks (`trainer.logits_chunk_mib`): the same logprobs, entropy and gradients
as computing every loss token's logits at once, and the same train step."""

from __future__ import annotations

import copy

import pytest
import torch

from forge_agent.trainer.logprobs import chunked_head_logprobs


@pytest.mark.parametrize("entropy", ["none", "metric", "grad"])
def test_chunks_give_the_same_values_and_gradients(entropy):
    torch.manual_seed(0)
    vocab, dim, n = 4096, 32, 300
    head = torch.nn.Linear(dim, vocab, bias=False)
    h = torch.randn(n, dim, requires_grad=True)
    nxt = torch.randint(0, vocab, (n,))
    weights = torch.randn(n)
    results = []
    for chunk_mib in (0, 1):  # 1 MiB of fp32 logits: 64 rows a chunk, 5 chunks
        head.zero_grad()
        h.grad = None
        logp, ent = chunked_head_logprobs(head, h, nxt, entropy, chunk_mib)
        loss = (logp * weights).sum()
        if entropy == "grad":
            loss = loss + 0.1 * ent.sum()
        loss.backward()
        results.append((logp.detach(), ent, h.grad.clone(), head.weight.grad.clone()))
    (lp0, e0, gh0, gw0), (lp1, e1, gh1, gw1) = results
    assert lp0.shape == (n,)
    torch.testing.assert_close(lp1, lp0, rtol=0, atol=1e-5)
    torch.testing.assert_close(gh1, gh0, rtol=0, atol=1e-5)
    torch.testing.assert_close(gw1, gw0, rtol=0, atol=1e-5)
    if entropy == "none":
        assert e0 is None and e1 is None
    else:
        torch.testing.assert_close(e1.detach(), e0.detach(), rtol=0, atol=1e-5)
        assert e1.requires_grad == (entropy == "grad")
    # the values themselves: log-softmax of the full logits
    want = torch.log_softmax(head(h), -1).gather(-1, nxt[:, None]).squeeze(-1)
    torch.testing.assert_close(lp0, want.detach().float(), rtol=0, atol=1e-5)


def test_a_train_step_with_chunked_logits_matches_the_whole():
    from apps.bench.train_step import mixed_trajectories
    from forge_agent.algorithms.losses import LossConfig
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model
    from forge_agent.trainer import Trainer, TrainerConfig

    vocab = 2048
    trajs = mixed_trajectories(8, vocab)
    model = build_model(TinyModelConfig(hidden_size=64, num_layers=2, head_dim=16), vocab)
    after = []
    for chunk_mib in (0, 1):  # 1 MiB: 128 rows of 2048 fp32 logits a chunk
        cfg = TrainerConfig(
            lr=1e-3, loss=LossConfig.preset("grpo"), logits_chunk_mib=chunk_mib, row_tokens=1024
        )
        trainer = Trainer(cfg, copy.deepcopy(model))
        metrics = trainer.train_step(trajs)
        after.append((metrics, trainer.model.state_dict()))
    (m0, w0), (m1, w1) = after
    assert sum(sum(t.loss_mask) for t in trajs) > 4 * 128  # several chunks a micro-batch
    assert m1["entropy"] == pytest.approx(m0["entropy"], rel=1e-5)
    assert m1["train/grad_norm"] == pytest.approx(m0["train/grad_norm"], rel=1e-4)
    for k in w0:
        torch.testing.assert_close(w1[k], w0[k], rtol=0, atol=1e-6)


def test_a_negative_chunk_size_is_refused():
    from forge_agent.trainer import TrainerConfig

    with pytest.raises(ValueError, match="logits_chunk_mib"):
        TrainerConfig(logits_chunk_mib=-1)

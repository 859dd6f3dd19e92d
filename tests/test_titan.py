"""torchtitan backend: weight conversion to the transformers layout, checked by forward parity.

torchtitan's Qwen3 runs its forward on CPU but not its backward (FlexAttention), so the train
step is checked only where a GPU exists.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None,
    reason="torchtitan is not installed (pip install torchtitan==0.3.0; it needs triton)",
)


def hf_tiny(seed: int = 0):
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model

    shape = TinyModelConfig(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=128, max_position_embeddings=256, seed=seed,
    )  # fmt: skip
    model = build_model(shape, 512).eval()
    with torch.no_grad():  # non-trivial norms so a swapped norm weight would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


@pytest.fixture(scope="module")
def converted():
    from forge_agent.trainer.titan import hf_to_titan, titan_qwen3_config

    hf = hf_tiny()
    cfg = titan_qwen3_config(hf.config)
    titan = cfg.build()
    missing, unexpected = titan.load_state_dict(hf_to_titan(hf.state_dict(), cfg), strict=False)
    assert unexpected == [] and all("rope" in k for k in missing), (missing, unexpected)
    return hf, cfg, titan.eval()


def test_titan_forward_on_packed_rows_matches_transformers_per_sequence(converted):
    hf, _, titan = converted
    # one packed row of two sequences (26 tokens: the same shape as the trainer test below, so
    # FlexAttention compiles once)
    a, b = torch.randint(0, 512, (14,)), torch.randint(0, 512, (12,))
    tokens = torch.cat([a, b])[None]
    positions = torch.cat([torch.arange(14), torch.arange(12)])[None]
    with torch.no_grad():
        got = titan(tokens, positions, titan.get_attention_masks(positions))[0]
        want_a, want_b = hf(a[None]).logits[0], hf(b[None]).logits[0]
    torch.testing.assert_close(got[:14], want_a, atol=1e-5, rtol=0)
    torch.testing.assert_close(got[14:], want_b, atol=1e-5, rtol=0)


def test_titan_to_hf_round_trips_every_weight_exactly(converted):
    from forge_agent.trainer.titan import titan_to_hf

    hf, cfg, titan = converted
    back = titan_to_hf(titan.state_dict(), cfg)
    want = hf.state_dict()
    assert set(back) == set(want)
    for k in want:
        assert torch.equal(back[k], want[k]), k


def test_titan_trainer_loads_an_hf_folder_and_matches_transformers_logprobs(tmp_path):
    from forge_agent.trainer import Trainer, TrainerConfig
    from forge_agent.trainer.titan import TitanTrainer
    from forge_agent.types import Trajectory

    hf = hf_tiny()
    hf.save_pretrained(tmp_path)
    trajs = [
        Trajectory(
            "t",
            str(n),
            token_ids=list(range(3, 3 + n)),
            loss_mask=[0] + [1] * (n - 1),
            logprobs=[0.0] * n,
        )
        for n in (5, 9, 12)
    ]
    cfg = TrainerConfig(row_tokens=32)
    titan = TitanTrainer(cfg, str(tmp_path))
    hf = Trainer(cfg, str(tmp_path))
    for got, want in zip(titan.compute_logprobs(trajs), hf.compute_logprobs(trajs), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    back = titan.state_dict()
    for k, v in hf.state_dict().items():
        assert torch.equal(back[k], v), k


def test_titan_train_step_needs_a_gpu():
    if not torch.cuda.is_available():
        pytest.skip(
            "no CUDA device: torchtitan 0.3.0's Qwen3 uses FlexAttention, whose backward is not "
            "implemented on CPU ('FlexAttention does not support backward on CPU')"
        )
    import tempfile

    from forge_agent.trainer import TrainerConfig
    from forge_agent.trainer.titan import TitanTrainer
    from forge_agent.types import Trajectory

    with tempfile.TemporaryDirectory() as d:
        hf_tiny().save_pretrained(d)
        trainer = TitanTrainer(TrainerConfig(lr=1e-2), d, dtype="float32")
        good = Trajectory(
            "t",
            "g",
            token_ids=[5, 6, 7, 10, 11],
            loss_mask=[0, 0, 0, 1, 1],
            logprobs=[0.0] * 5,
            advantage=1.0,
        )
        before = float(trainer.compute_logprobs([good])[0][3:].sum())
        for _ in range(3):
            good.logprobs = trainer.compute_logprobs([good])[0].tolist()
            trainer.train_step([good])
        assert float(trainer.compute_logprobs([good])[0][3:].sum()) > before
        assert set(trainer.state_dict()) == set(hf_tiny().state_dict())

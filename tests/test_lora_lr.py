"""A LoRA run uses a LoRA learning rate unless `trainer.lr` is set."""

from __future__ import annotations

from forge_agent.run.config import load_config


def test_a_lora_run_without_trainer_lr_trains_at_the_lora_rate():
    assert load_config(None, ["trainer.lora.rank=16"]).trainer.learning_rate == 1e-3


def test_a_full_fine_tuning_run_without_trainer_lr_trains_at_the_full_rate():
    assert load_config(None, []).trainer.learning_rate == 1e-4


def test_a_set_trainer_lr_wins_over_the_lora_rate():
    cfg = load_config(None, ["trainer.lora.rank=16", "trainer.lr=2e-4"])
    assert cfg.trainer.learning_rate == 2e-4

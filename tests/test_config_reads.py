"""No dead key: every field of the run's config is read by the code of a short run.

The run is the real stack on CPU (tiny model, a short warm start, two GRPO steps with an
evaluation, a checkpoint and a plot); reads are recorded on the config's own dataclasses.
The `trainer` and `generator` sections travel whole to actors in other processes, where reads
are not recorded: the test replays, in this process, the code those actors run on them
(`build_trainer` + one train step; the engine's environment and arguments).
"""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.run.config import load_config
from tests.config_reads import record_reads

# Read when the config is built, not later: documented, not dead.
READ_AT_BUILD = {
    "resume": "a shortcut that sets checkpoint.resume in AgentConfig.__post_init__",
    "trainer.loss.name": "the preset LossConfig.__post_init__ fills the loss fields from",
}


# Read only off the default placement: `hosts` (every key but `kind`) is read when it names
# other hosts, which tests/test_multihost_training.py and tests/test_hosts.py run.
# `advantages.omega` is read with turn_credit=gigpo, which needs an env with a state key (the
# short run's calculator has none): tests/test_turn_credit.py reads it. `rollout.context`'s
# budget, keep_last and roles are read by a strategy other than `keep` once a prompt passes the
# budget: tests/test_context.py reads them.
READ_OFF_THIS_PATH = (
    "hosts.",
    "advantages.omega",
    "rollout.context.budget",
    "rollout.context.keep_last",
    "rollout.context.roles",
)


def replay_actor_reads(cfg) -> None:
    """What the trainer and generator actors do with their sections (see the module doc)."""
    from forge_agent.generator.engine_args import (
        engine_args,
        engine_environ,
        engine_process_environ,
    )
    from forge_agent.run.controller import start_policy
    from forge_agent.trainer.actor import build_trainer
    from tests.helpers import random_trajectories

    path = str(start_policy(cfg, ResolvedEnv.of(cfg.env)))
    run = {"device": cfg.device, "dtype": cfg.model.dtype, "seed": cfg.seed}
    trainer = build_trainer(cfg.trainer, path, 1, **run)
    trainer.train_step(random_trajectories(trainer.model.config.vocab_size))
    engine_environ(cfg.generator)
    engine_process_environ(cfg.generator)
    engine_args(cfg.generator, path, cfg.model.dtype, cfg.seed)


@pytest.fixture(scope="module")
def short_run_reads(tmp_path_factory):
    import forge_agent.run.controller as controller
    import forge_agent.run.outputs as outputs

    out = tmp_path_factory.mktemp("reads")
    cfg = load_config(
        None,
        [
            f"output_dir={out}",
            "warm_start.steps=2",
            "warm_start.batch_size=4",
            "warm_start.num_demos=16",
            "training.steps=2",
            "training.groups_per_step=1",
            "training.group_size=4",
            "trainer.loss.kl_coef=0.01",  # the KL term runs (it reads kl_estimator)
            "advantages.drop_zero_variance=false",
            "advantages.turn_credit=discounted",  # reads gamma
            "env.curriculum.kwarg=difficulty",
            "env.curriculum.levels=[1,2]",
            "services.env.num_replicas=2",
            "eval.every=2",
            "eval.num_tasks=2",
            "eval.k=2",
            "checkpoint.every=2",
            "metrics.plot_every=2",
            "metrics.console=false",
        ],
    )
    with record_reads(cfg) as recorder:
        dump = outputs.dump_yaml

        def dump_paused(*args, **kwargs):  # writing config.yaml reads every key: not a use
            with recorder.paused():
                return dump(*args, **kwargs)

        outputs.dump_yaml = dump_paused
        try:
            summary = asyncio.run(controller.train(cfg))
        finally:
            outputs.dump_yaml = dump
        replay_actor_reads(cfg)
    return summary, recorder


def test_a_short_run_reads_every_config_field(short_run_reads):
    summary, recorder = short_run_reads
    assert summary["steps"] == 2
    unread = recorder.leaves() - recorder.reads - set(READ_AT_BUILD)
    dead = sorted(k for k in unread if k == "hosts.kind" or not k.startswith(READ_OFF_THIS_PATH))
    assert dead == [], f"config fields no code read during the run: {dead}"

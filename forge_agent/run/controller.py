"""The driver: a rollout loop and a training loop, and the calls between the services.

    Curriculum ─► RolloutRunner ─► generator replicas (vLLM) + env workers ─► reward actor
       ─► advantages ─► ReplayBuffer (staleness bound) ─► Trainer ─► WeightStore ─► generators

`training.max_policy_lag` = 0 pauses rollouts while the trainer steps and syncs (on-policy);
n > 0 lets them run on (no trained token more than n versions old; algorithms/replay.py) and a
weight sync continues running requests on the new weights. Elsewhere: the rollout loop
(`run.rollout_loop`), services and their calls (`run.services`), checkpoints and going back
(`run.recovery`), rollout runners and eval (`run.runners`), the output folder
(`run.outputs`), signals (`run.signals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_agent.algorithms.replay import ReplayBuffer, check_token_lags
from forge_agent.env.curriculum import Curriculum
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import eval_tasks
from forge_agent.errors import SetupError
from forge_agent.evaluation import kind_drop_warnings
from forge_agent.hosts.meshes import HostMeshes, resolve_host_meshes
from forge_agent.models.hub import parameter_count, resolve_model
from forge_agent.models.tiny import ensure_tiny_model
from forge_agent.observability.loop_timing import LoopTiming
from forge_agent.observability.metrics import MetricLogger, record
from forge_agent.observability.step_profile import PhaseClock
from forge_agent.observability.traces import TraceWriter
from forge_agent.run import outputs
from forge_agent.run.child import run_in_child
from forge_agent.run.config import AgentConfig
from forge_agent.run.failures import FailureContext, run_failed, write_stop_summary
from forge_agent.run.loop_result import LoopClock, LoopResult
from forge_agent.run.recovery import Recovery
from forge_agent.run.rollout_loop import RolloutLoop
from forge_agent.run.runners import Runners, build_run_runners, evaluate_policy
from forge_agent.run.services import Services
from forge_agent.run.setup_checks import check_colocation_device, check_run_choices
from forge_agent.run.signals import cancel_on_signals, python_handlers, raise_if_cancelled
from forge_agent.run.state import RunState
from forge_agent.run.stop_causes import check_start_signal, warm_start_kind
from forge_agent.run.supervision import ServiceRestarted
from forge_agent.trainer.precision import announce_autocast
from forge_agent.types import Group, Trajectory
from forge_agent.warm_start import policy_model

logger = logging.getLogger(__name__)

GenerateWrapper = Callable[[Any], Any]


class Controller:
    """Builds the services from an `AgentConfig` and runs GRPO over them.

    `generate_wrapper` wraps the generate function (tests inject generator faults with it).
    """

    def __init__(self, cfg: AgentConfig, generate_wrapper: GenerateWrapper | None = None) -> None:
        self.cfg = cfg
        self.generate_wrapper = generate_wrapper
        self.services: Services | None = None
        self.host_meshes: HostMeshes | None = None  # released (a Slurm job cancelled) at the end
        self.runners: Runners | None = None
        self.state = RunState()  # step, version, epoch, counts, errors, evals: the loops' own
        self.profile = PhaseClock()  # per-step phases (profile/* metrics)
        self.timing = LoopTiming()

    async def setup(self) -> None:
        """Tasks, the policy (after its warm start), services, rollout runners, buffer, metrics."""
        cfg = self.cfg
        # what the config and the env decide fails before any host is asked for (a Slurm job
        # submitted, then waited for in its queue, to say the config was wrong)
        self.env = env = ResolvedEnv.of(cfg.env)  # the one lookup of env.id: an unknown id fails
        check_run_choices(cfg, env)  # a curriculum or credit the env cannot follow fails here
        check_colocation_device(cfg.services.colocate)  # this machine: sleep mode needs CUDA
        # the first Monarch call: it picks Monarch's transport. A Slurm job's wait for its nodes
        # blocks this thread: a signal then raises there, and the job is cancelled even while
        # it queues
        with python_handlers():
            meshes = self.host_meshes = await resolve_host_meshes(cfg.hosts)
        self.out = outputs.prepare_output_dir(cfg.output_dir, cfg.checkpoint.resume, cfg)
        self.tasks = Curriculum(env)  # so do a bad env, dataset or task
        self.eval_tasks = eval_tasks(env, cfg.eval.num_tasks) if cfg.eval.every else []
        with python_handlers():  # the warm start blocks this thread for minutes
            self.policy_path = start_policy_in_child(cfg, env)
        print(f"[setup] policy: {self.policy_path}", flush=True)
        self.services = Services(
            cfg.service_specs(), self.policy_path, self._trainer_restarted,
            self._generator_restarted, env=env,
        )  # fmt: skip
        generator = await self.services.start(meshes)
        self.runners = await build_run_runners(
            cfg.runner_config(), env, self.services, self.policy_path,
            int(generator["max_model_len"]),
            wrap=self._wrap_generate, wrap_envs=self.profile.timed_envs,
        )  # fmt: skip
        self.traces = TraceWriter(self.out / "traces.jsonl", keep=cfg.metrics.traces_last)
        self.eval_episodes: list[Trajectory] = []  # the last evaluation's, kept for a stop
        self.runners.eval.on_trajectory = self.eval_episodes.append
        self.buffer = ReplayBuffer(cfg.training.replay_capacity, cfg.training.max_policy_lag)
        self.rollouts = RolloutLoop(
            cfg.training, cfg.advantages, cfg.rollout.max_concurrent_episodes, self.state,
            self.runners.train, self.services, self.tasks, self.buffer, self.traces, self.profile,
        )  # fmt: skip
        self.metrics = MetricLogger.from_config(cfg.metrics, self.out, cfg.training.steps)
        self.recovery = Recovery(
            self.out / "checkpoints", cfg.checkpoint.keep, self.services, self.tasks, self.buffer
        )
        if cfg.checkpoint.resume:
            await self._resume()

    # ------------------------------------------------------------------ training loop
    async def run(self) -> dict[str, Any]:
        """The training loop. Consumes batches of fresh scored groups from the replay buffer;
        produces policy versions (trainer step, then weight store -> every generator); waits on
        the buffer, the trainer and the weight sync. Returns the summary (summary.json)."""
        cfg, gps = self.cfg, self.cfg.training.groups_per_step
        clock = await LoopClock.start(self.services.generators)
        self.timing = clock.timing  # the loop's clock: setup (warm start, actors) is not in it
        await self._evaluate_before_training()
        self.profile.start()
        rollouts = asyncio.create_task(self.rollouts.run())
        try:
            while self.state.step < cfg.training.steps:
                raise_if_cancelled()  # a Ctrl-C whose cancel an await swallowed (run.signals)
                groups = await self.buffer.take_while(rollouts, gps, self.state.version)
                stepped = await self._train_step(groups)
                if stepped is None:  # no kept group, or the trainer went back to a checkpoint
                    continue
                if await self._evaluate_and_checkpoint():
                    self._log_step(*stepped)
            raise_if_cancelled()
        finally:
            rollouts.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rollouts
        result = await self._loop_result(clock)
        summary = outputs.run_summary(result, self.policy_path, self.state.resumed_from)
        outputs.write_summary(self.out, summary)
        return summary

    async def _train_step(self, groups: list[Group]) -> tuple[dict[str, float], list[int]] | None:
        """One trainer step on the groups' trajectories, then the weight sync every
        `training.sync_interval` steps; (the trainer's metrics, the trained tokens' policy
        lags). None when no step was taken: every group of the step was dropped (no dynamic
        sampling), or the trainer restarted and went back to its checkpoint (the batch is
        lost, and counted)."""
        cfg, services = self.cfg, self.services
        batch = [t for g in groups for t in g.trajectories]
        if not batch:
            self.state.counts["steps_without_kept_groups"] += 1
            await self.buffer.reopen()
            return None
        record("train/groups", sum(1 for g in groups if g.trajectories), "last")
        lags = check_token_lags(batch, self.state.version, cfg.training.max_policy_lag)
        if cfg.training.max_policy_lag == 0:
            self.rollouts.open.clear()  # on-policy: no rollouts while the policy changes
        try:
            with self.timing.measure("trainer_busy"), self.profile.phase("train"):
                await services.generators.sleep()  # colocated: the trainer's GPU
                metrics = await services.train_step(batch)
            self.state.step += 1
            self.state.version = int(metrics.get("train/policy_version", self.state.version + 1))
            await self.buffer.set_version(self.state.version)
            await services.generators.wake_up(["weights"])  # colocated: no KV cache yet
            if self.state.step % cfg.training.sync_interval == 0:
                await self._sync_weights(self.state.version)
        except ServiceRestarted as exc:  # the trainer went back to its checkpoint
            if exc.service != services.trainer.name:
                raise
            self.state.counts["batches_lost_to_trainer_restart"] += 1
            return None
        finally:
            await services.generators.wake_up(["weights", "kv_cache"])  # what sleeps
            self.rollouts.open.set()
        return metrics, lags

    async def _evaluate_and_checkpoint(self) -> bool:
        """The held-out evaluation and the checkpoint due after this step (`eval.every`,
        `checkpoint.every`, and both after the last step). False when the trainer died while
        saving: it went back to the last complete checkpoint, so the step is not logged."""
        cfg = self.cfg
        last = self.state.step == cfg.training.steps
        if cfg.eval.every and (self.state.step % cfg.eval.every == 0 or last):
            with self.profile.phase("eval"):
                await self._evaluate()
        if cfg.checkpoint.every and (self.state.step % cfg.checkpoint.every == 0 or last):
            try:
                with self.profile.phase("checkpoint"):
                    await self.recovery.save(self.state.step)
            except ServiceRestarted:  # died while saving: back to the last complete one
                self.state.counts["checkpoints_lost_to_trainer_restart"] += 1
                return False
        return True

    async def _sync_weights(self, version: int) -> None:
        """Trainer -> weight store -> every generator replica (fan-out), bounded in time.
        Async (lag > 0): running requests continue on the new weights (partial rollouts);
        on-policy: they finish on the old weights first."""
        started = time.monotonic()
        with self.profile.phase("weight_sync"):
            version = await self.services.push_weights()
            in_flight = "continue" if self.cfg.training.max_policy_lag > 0 else "finish"
            await self.services.generators.update(version, in_flight=in_flight)
        record("weight_sync/s", time.monotonic() - started)

    # ------------------------------------------------------------------ evaluation
    async def _evaluate_before_training(self) -> None:
        """The step's held-out evaluation before the first step (`eval.every` > 0); at step 0,
        a run whose policy makes no tool call or earns no reward at all stops here, saying
        why (`check_start_signal`)."""
        if not self.cfg.eval.every:
            return
        await self._evaluate()
        self.metrics.flush(self.state.step, progress=False)  # at its own step, not on step 1's
        if self.state.step == 0:
            params = parameter_count(self.policy_path)
            taught = warm_start_kind(self.cfg.warm_start, self.env)
            state = self.state
            try:
                facts = self.cfg.stop_facts()
                check_start_signal(state.evals[0], facts, params, state.eval_errors, taught)
            except SetupError as stop:  # the episodes it judged are kept to look at
                stop.args = (f"{stop}{self._keep_eval_episodes()}",)
                raise

    def _keep_eval_episodes(self) -> str:
        """The last evaluation's episodes written to traces.jsonl (the page follows at
        shutdown); what the stop's line says of them."""
        for traj in self.eval_episodes:
            self.traces.write(traj, {"step": self.state.step, "split": "eval"})
        kept = min(len(self.eval_episodes), self.cfg.metrics.traces_last)
        return (
            f" (the {kept} last of the {len(self.eval_episodes)} held-out episodes it judged: "
            f"{self.out / 'traces.jsonl'} and traces.html)"
        )

    async def _evaluate(self) -> None:
        """Held-out tasks at `eval.temperature`, no training groups started meanwhile."""
        self.eval_episodes.clear()
        self.rollouts.open.clear()
        busy = await self.services.generators.busy_seconds()
        try:
            with self.timing.measure("eval"):
                metrics, self.state.eval_errors = await evaluate_policy(
                    self.runners, self.eval_tasks, self.cfg.eval.k, self.cfg.seed, self.state.step
                )
        finally:
            self.rollouts.open.set()
            busy = await self.services.generators.busy_seconds() - busy
            self.timing.add("generator_busy_eval", busy)
        # wall_s: seconds of training so far, evaluation excluded (time-to-reward comparisons)
        wall_s = self.timing.loop_seconds()
        self.state.evals.append({"step": self.state.step, "wall_s": wall_s, **metrics})
        first = self.state.evals[0]
        if first["step"] == 0 and self.state.step > 0:
            for warning in kind_drop_warnings(first, metrics, self.state.step):
                print(warning, flush=True)  # a kind > 0.1 below step 0 (evaluation.py)
                self.state.counts["eval_kind_regressions"] += 1

    def _wrap_generate(self, generate: Any) -> Any:
        """Step timing around the test's `generate_wrapper` (if any) around `generate`."""
        if self.generate_wrapper is not None:
            generate = self.generate_wrapper(generate)
        return self.profile.timed_generate(generate)

    # ------------------------------------------------------------------ recovery
    async def _resume(self) -> None:
        """`resume=true`: continue from the newest complete checkpoint in `output_dir`."""
        restored = await self.recovery.resume()
        if restored is None:
            logger.info("resume: no checkpoint under %s; starting fresh", self.out)
            return
        self.state.resumed_from = {k: v for k, v in restored.position.items() if k != "replay"}
        self.state.step, self.state.version = restored.step, restored.version
        if self.state.version > 0:
            await self._sync_weights(self.state.version)
        state = self.state
        print(f"[resume] {restored.path.name}: step {state.step}, policy version {state.version}")

    async def _trainer_restarted(self, trainer: Any) -> None:
        """A replacement trainer goes back to the last checkpoint (`Recovery`); groups sampled
        by the lost policy versions are discarded."""
        self.state.epoch += 1  # groups started before now belong to lost policy versions
        restored, self.state.version = await self.recovery.trainer_restarted(trainer)
        self.state.step = restored.step if restored else 0
        where = restored.path.name if restored else "the initial policy (no checkpoint yet)"
        state = self.state
        print(f"[restart] trainer resumed from {where}: step {state.step}, version {state.version}")

    async def _generator_restarted(self, generator: Any) -> None:
        """A replacement replica starts from the current policy, not the initial weights."""
        if self.state.version > 0:
            await self.services.generators.update(self.state.version, only=generator)

    # ------------------------------------------------------------------ bookkeeping
    def _log_step(self, train_metrics: dict[str, float], lags: list[int]) -> None:
        """A finished step's metrics flushed (`outputs.log_step`), with the replay buffer's
        evictions, the restarts and where the step's time went; curves when they are due."""
        every = self.cfg.metrics.plot_every
        gauges = {
            "replay/evicted_stale": self.buffer.evicted,
            "replay/evicted_trajectories": self.buffer.evicted_trajectories,
            "restarts/total": self.services.restarts(),
            **self.profile.step_metrics(),
        }
        curves = self.out if every and self.state.step % every == 0 else None
        outputs.log_step(self.metrics, self.state.step, train_metrics, lags, gauges, curves)

    async def _loop_result(self, clock: LoopClock) -> LoopResult:
        """What the loop measured: steps, time, evals, counts (replay evictions and each
        service's restarts included), restart causes and the curriculum's progress."""
        wall_s, timing = await clock.stop()
        services = self.services.supervised
        self.state.counts["replay_evicted"] = self.buffer.evicted
        for service in services:
            self.state.counts[f"restarts/{service.name}"] = service.restarts
        return LoopResult(
            steps=self.state.step,
            policy_version=self.state.version,
            wall_s=wall_s,
            timing=timing,
            profile=self.profile.summary(),
            evals=self.state.evals,
            counts=dict(self.state.counts),
            restarts={s.name: s.causes for s in services if s.causes},
            curriculum=self.tasks.summary(),
        )

    def failure_context(self) -> FailureContext:
        """What `run.failures` reads when the run fails: the config, the state, and what setup
        had built by then (None for what it had not)."""
        services = self.services
        return FailureContext(
            facts=self.cfg.stop_facts(),
            state=self.state,
            env=getattr(self, "env", None),
            out=getattr(self, "out", None),
            recovery=getattr(self, "recovery", None),
            trainer=services.trainer.name if services is not None else None,
            policy_path=getattr(self, "policy_path", None),
        )

    async def shutdown(self) -> None:
        """Stop everything this controller started (actors, workers, sandboxes) and write the
        trace page and the curves; then give a Slurm job's nodes back (`hosts.keep_allocation`)."""
        try:
            if hasattr(self, "traces"):
                outputs.finish(
                    self.out, self.traces, self.metrics, self.cfg.metrics, self.policy_path
                )
            if self.runners is not None:
                with contextlib.suppress(Exception):
                    await self.runners.stop()
            if self.services is not None:
                await self.services.shutdown()
        finally:
            if self.host_meshes is not None:
                self.host_meshes.release()


def start_policy(cfg: AgentConfig, env: ResolvedEnv) -> Path:
    """The driver's policy: the base model (`model.name`: the tiny model, built here once, or a
    folder or hub name in the local HF cache) warm-started on `env` (the run's env, resolved)
    when `warm_start.enabled` (cached; `warm_start.policy_model`)."""
    # trainer.autocast=auto: the choice and its reason, once on the console
    announce_autocast(cfg.trainer.autocast, cfg.device, "run")
    model = cfg.model
    if model.name == "tiny":
        base = ensure_tiny_model(model.tiny_config())
    else:
        base = resolve_model(model.name, dtype=model.storage_dtype)
    return policy_model(
        base, env, cfg.warm_start, cfg.rollout,
        device=cfg.device, autocast=cfg.trainer.autocast, tiny=model.name == "tiny",
    )  # fmt: skip


def start_policy_in_child(cfg: AgentConfig, env: ResolvedEnv) -> Path:
    """`start_policy` in a child process of its own (`run.child.run_in_child`): the base model,
    the demonstrations and the supervised pass (a trainer with its optimizer: 6.6 GB in a
    SmolLM2-135M run's controller, which kept them) live and die in the child; the driver reads
    back the policy folder's path. Its lines reach the console as the driver's own; its error is
    raised here as itself. A `cfg` or `env` that does not pickle (an env class defined where a
    child cannot import it) resolves here, as before, with a warning; so does a run without a
    warm start (`warm_start.enabled: false` or no steps), which has nothing to train."""
    if not cfg.warm_start.enabled or cfg.warm_start.steps <= 0:
        return start_policy(cfg, env)  # nothing trains: a child would only add its start-up
    try:
        pickle.dumps((cfg, env))
    except Exception as exc:  # any pickling failure: resolve here instead
        logger.warning("the warm start runs in this process: its inputs do not pickle (%s)", exc)
        return start_policy(cfg, env)
    return run_in_child(start_policy, cfg, env, what="warm start")


async def train(cfg: AgentConfig, generate_wrapper: GenerateWrapper | None = None) -> dict:
    """Build, run and always shut down a controller for `cfg`; Ctrl-C (SIGINT) and SIGTERM
    stop it at any point, every actor, env worker and sandbox shut down (`run.signals`).
    A failure after setup raises `RunFailed` (`run.failures`: the part, a last checkpoint)."""
    controller = Controller(cfg, generate_wrapper)
    try:
        await controller.setup()
        with cancel_on_signals(asyncio.current_task()):
            try:
                return await controller.run()
            except SetupError as exc:  # the step-0 check: a bad input, not a failure
                write_stop_summary(controller.failure_context(), exc)
                raise
            except Exception as exc:
                raise await run_failed(exc, controller.failure_context()) from exc
    finally:
        await controller.shutdown()


__all__ = ["Controller", "start_policy", "start_policy_in_child", "train"]

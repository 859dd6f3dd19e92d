"""The training controller: actors on Monarch proc meshes, a rollout loop and a training loop.

    model ─► (warm start) ─► Generator replicas (vLLM)  ◄── weights ── WeightStore ◄── Trainer
                                   │ token ids                                          ▲
    TaskStream ─► RolloutEngine ───┴─► env workers (EnvPool) ─► RewardActor ─► advantages
                                                                                   │
                                                  ReplayBuffer (staleness bound) ◄─┘

Rollout loop (`_produce`): consumes tasks, produces scored groups with advantages into the
replay buffer; waits on the generator, env workers, reward actors, and on buffer space.
Training loop (`run`): consumes batches of fresh groups, produces a new policy version; waits on
the buffer, the trainer and the weight sync. `training.max_policy_lag` = 0 pauses rollouts while
the trainer steps and syncs (on-policy); n > 0 lets them run on, and no trained token was sampled
more than n versions before the policy it trains (per-token check; see replay.py). In async mode
a weight sync interrupts running requests and continues them on the new weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from forge_agent.config import AgentConfig, dump_yaml
from forge_agent.observability.step_profile import PhaseClock
from forge_agent.rewards.build import AGENT_REWARD, build_rubric
from forge_agent.runtime.services import Services
from forge_agent.runtime.supervision import ServiceFailed, ServiceRestarted
from forge_agent.types import Group, Status, Trajectory

logger = logging.getLogger(__name__)

GenerateWrapper = Callable[[Any], Any]


# ----------------------------------------------------------------------------- controller
class Controller:
    """Builds the actors from an `AgentConfig` and runs GRPO.

    `generate_wrapper` wraps the generate function (tests inject generator faults with it).
    """

    def __init__(self, cfg: AgentConfig, generate_wrapper: GenerateWrapper | None = None) -> None:
        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        self.generate_wrapper = generate_wrapper
        self.services: Services | None = None  # actors and env workers, once setup() runs
        self.endpoint: Any = None  # the agent endpoint, for env.id=agent:...
        self.version = 0
        self.step = 0
        self.counts: Counter[str] = Counter()
        self.history: list[dict[str, float]] = []
        self.resumed_from: dict[str, Any] | None = None
        self._gate = asyncio.Event()
        self._gate.set()
        self.profile = PhaseClock()  # per-step phases (profile/* metrics)
        self.epoch = 0  # advances when a restarted trainer goes back to a checkpoint

    # ------------------------------------------------------------------ setup
    async def setup(self) -> None:
        from forge_agent.algorithms.replay import ReplayBuffer, ZeroSignalWatch
        from forge_agent.models.tiny import load_tokenizer
        from forge_agent.observability.metrics import MetricLogger
        from forge_agent.observability.trace_html import load_token_decoder
        from forge_agent.observability.traces import TraceWriter
        from forge_agent.rollout import ChatRenderer, RendererConfig, RolloutEngine, SessionRouter
        from forge_agent.runtime.host_placement import resolve_host_meshes
        from forge_agent.tasks import TaskStream, load_tasks
        from forge_agent.warm_start import policy_model

        cfg = self.cfg
        # other hosts first: joining them picks this process's Monarch transport (TCP)
        meshes = await resolve_host_meshes(cfg.hosts)
        self.out.mkdir(parents=True, exist_ok=True)
        if not cfg.checkpoint.resume:
            self._clear_previous_outputs()
        dump_yaml(cfg, self.out / "config.yaml")

        # 0. tasks: a bad env id, dataset or task fails here, before any actor starts
        env = cfg.env
        self.tasks = TaskStream(
            env.id, dict(env.kwargs), env.train_seed, dataset=env.dataset, fields=env.fields
        )
        self.eval_tasks = (
            load_tasks(
                env.id,
                "eval",
                cfg.eval.num_tasks,
                env.eval_seed,
                dict(env.kwargs),
                dataset=env.dataset,
                fields=env.fields,
            )
            if cfg.eval.every > 0
            else []
        )

        # 1. model (+ warm start)
        self.policy_path = policy_model(cfg)
        print(f"[setup] policy: {self.policy_path}", flush=True)
        self.tokenizer = load_tokenizer(self.policy_path)
        renderer = ChatRenderer(
            self.tokenizer,
            RendererConfig(kind=cfg.model.renderer, enable_thinking=cfg.model.enable_thinking),
        )

        # 2. services: weight store, trainer, generator replicas, reward actors, env workers,
        # each on its host mesh (this host unless `hosts` names another), each actor a
        # supervised service, replaced when its process dies or hangs
        self.services = Services(
            cfg, self.policy_path, self._trainer_restarted, self._generator_restarted
        )
        gen_info = await self.services.start(meshes)
        max_len = int(gen_info["max_model_len"])

        # 3. rollout engines, data, buffer, metrics, traces
        episodes = replace(cfg.rollout, max_model_len=min(cfg.rollout.max_model_len, max_len))
        generate: Any = SessionRouter(self.services.generators)
        if self.generate_wrapper is not None:
            generate = self.generate_wrapper(generate)
        generate = self.profile.timed_generate(generate)
        envs = self.profile.timed_envs(self.services.pool)
        self.traces = TraceWriter(self.out / "traces.jsonl")
        rollout_cfgs = [episodes, replace(episodes, temperature=cfg.eval.temperature)]
        if cfg.env.id.startswith("agent:"):  # agent programs talk to an OpenAI endpoint
            from forge_agent.endpoint.agents import start_agent_engines

            self.endpoint, engines = await start_agent_engines(
                generate, envs, renderer, max_len, rollout_cfgs
            )
            self.engine, self.eval_engine = engines
        else:
            self.engine, self.eval_engine = (
                RolloutEngine(generate, envs, renderer, c) for c in rollout_cfgs
            )
        self.buffer = ReplayBuffer(cfg.training.replay_capacity, cfg.training.max_policy_lag)
        gps = cfg.training.groups_per_step
        self.zero_signal = ZeroSignalWatch(warn_after=4 * gps, fail_after=25 * gps)
        self.metrics = MetricLogger.from_config(cfg.metrics, self.out, cfg.training.steps)
        self.decode = load_token_decoder(self.policy_path)
        if cfg.checkpoint.resume:
            await self._resume()

    async def _generator_restarted(self, generator: Any) -> None:
        """A replacement replica starts from the current policy, not the initial weights."""
        if self.version > 0:
            await generator.update_weights.call_one(
                self.version, None, self.services.store, False, False
            )

    async def _trainer_restarted(self, trainer: Any) -> None:
        """A replacement trainer continues from the last complete checkpoint (policy,
        optimizer, data position, version), or from the initial policy when there is none;
        groups sampled by the lost policy versions are discarded, and the generators go back
        to the restored policy."""
        from forge_agent.trainer.checkpoint import complete_checkpoints

        checkpoints = complete_checkpoints(self.out / "checkpoints")
        self.epoch += 1  # groups started before now belong to lost policy versions
        position: dict[str, Any] = {}
        if checkpoints:
            ckpt = str(checkpoints[-1])
            position = await self.services.call_trainer("load_checkpoint", ckpt, on=trainer)
            self.tasks.load_state(position["tasks"])
        self.step = int(position.get("step", 0))
        self.version = int(await self.services.call_trainer("policy_version", on=trainer))
        replay = position.get("replay") or {
            "evicted": self.buffer.evicted,
            "evicted_trajectories": self.buffer.evicted_trajectories,
        }
        self.buffer.load_state_dict(replay, self.version)
        version = await self.services.call_trainer("push_weights", on=trainer)
        await asyncio.gather(  # back to the restored policy; requests in flight are dropped
            *(
                g.update_weights.call_one(version, None, self.services.store, True, False, True)
                for g in self.services.generators
            )
        )
        where = checkpoints[-1].name if checkpoints else "the initial policy (no checkpoint yet)"
        print(f"[restart] trainer resumed from {where}: step {self.step}, version {version}")

    def _clear_previous_outputs(self) -> None:
        """A fresh run in a used `output_dir` starts clean: appending to an old run's metrics,
        traces or checkpoints would mix two runs (resume=true continues one instead)."""
        old = [self.out / n for n in ("metrics.jsonl", "traces.jsonl", "checkpoints")]
        old = [p for p in old if p.exists()]
        if not old:
            return
        print(
            f"[fresh run] clearing the previous run's outputs in {self.out} "
            "(pass resume=true to continue it)",
            flush=True,
        )
        for path in old:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    # ------------------------------------------------------------------ rollout loop
    async def _produce(self) -> None:
        """Start the groups the buffer admits (`ReplayBuffer.room`: on-policy, exactly those
        the next step needs) while the gate is open; score and filter each as it finishes."""
        cfg = self.cfg
        max_groups = max(1, cfg.rollout.max_concurrent_episodes // cfg.training.group_size)
        running: set[asyncio.Task] = set()
        try:
            while True:
                while not self._gate.is_set():  # a wake-up may come after the gate re-closed
                    await self._gate.wait()
                room = self.buffer.room(len(running), cfg.training.groups_per_step)
                if len(running) < max_groups and room > 0:
                    task, seed = next(self.tasks)
                    running.add(asyncio.create_task(self._one_group(task, seed)))
                    continue
                # wait for a group to finish or the buffer to change (a take, a new version)
                changed = asyncio.ensure_future(self.buffer.changed())
                done, _ = await asyncio.wait(
                    running | {changed}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                for t in done - {changed}:
                    running.discard(t)
                    t.result()
        finally:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _one_group(self, task: dict[str, Any], seed: int) -> None:
        from forge_agent.algorithms.advantages import compute_advantages
        from forge_agent.observability.metrics import record

        epoch = self.epoch
        group = await self.engine.run_group(task, seed, self.cfg.training.group_size)
        try:
            with self.profile.phase("reward"):
                score = self.services.rewards.score
                try:
                    scored, reward_metrics = await score.choose(group.trajectories)
                except ServiceRestarted:  # the reward actor died and was replaced: again
                    scored, reward_metrics = await score.choose(group.trajectories)
        except ServiceFailed:
            raise
        except Exception as exc:  # the whole reward service failed: mark, do not crash
            self.counts["reward_service_error"] += 1
            logger.warning("reward scoring failed for %s: %s", group.task_id, exc)
            return
        if epoch != self.epoch:  # sampled by a policy a trainer restart went back from
            self.counts["groups_discarded_after_restart"] += 1
            return
        group = Group(task_id=group.task_id, trajectories=list(scored))
        for traj in group.trajectories:
            self.traces.write(traj, {"step": self.step, "policy_version": self.version})
            self._record_episode(traj)
        for name, value in reward_metrics.items():
            record(name, value)
        kept, stats = compute_advantages([group], self.cfg.advantages)
        for name, value in stats.as_metrics().items():
            record(name, value, "sum")
        self.counts["groups_produced"] += 1
        self.zero_signal.observe(bool(kept), [t.reward for t in group.trajectories], stats.dropped)
        if kept:
            await self.buffer.put(Group(task_id=group.task_id, trajectories=kept))
        else:
            self.counts["groups_filtered"] += 1

    def _record_episode(self, traj: Trajectory) -> None:
        from forge_agent.observability.metrics import record

        self.counts[f"status/{traj.status.value}"] += 1
        self.counts["tool_errors"] += traj.tool_error_count
        if traj.info.get("reward_errors"):
            self.counts["reward_errors"] += 1
        record("reward/mean", traj.reward)
        record("episode/num_tokens", len(traj.token_ids))
        record("episode/turns", len(traj.turn_spans))
        record("tools/call_rate", float(traj.tool_call_count > 0))
        record("tools/errors", traj.tool_error_count, "sum")
        record(f"status/{traj.status.value}", 1, "sum")

    # ------------------------------------------------------------------ training loop
    async def run(self) -> dict[str, Any]:
        """Train `training.steps` steps; returns a summary (also written to summary.json)."""
        from forge_agent.algorithms.replay import check_token_lags
        from forge_agent.observability.loop_timing import LoopTiming
        from forge_agent.observability.metrics import record

        cfg = self.cfg
        started = time.monotonic()
        self.timing = LoopTiming()
        busy_at_start = await self.services.generator_busy()
        evals: list[dict[str, float]] = []
        if cfg.eval.every > 0:
            evals.append(await self._evaluate())
        self.profile.start()
        producer = asyncio.create_task(self._produce())
        try:
            while self.step < cfg.training.steps:
                groups = await self._take(producer)
                batch = [t for g in groups for t in g.trajectories]
                lags = check_token_lags(batch, self.version, cfg.training.max_policy_lag)
                if cfg.training.max_policy_lag == 0:
                    self._gate.clear()  # on-policy: no rollouts while the policy changes
                try:
                    metrics = await self._train_and_sync(batch)
                except ServiceRestarted as exc:  # the trainer went back to its checkpoint
                    if exc.service != self.services.trainer.name:
                        raise
                    self.counts["batches_lost_to_trainer_restart"] += 1
                    continue
                finally:
                    self._gate.set()
                for name, value in metrics.items():
                    record(name, value)
                record("policy/lag", sum(lags) / len(lags))  # mean over trained tokens
                record("policy/lag_max", max(lags), "max")
                record("replay/evicted_stale", self.buffer.evicted, "last")
                record("restarts/total", self.services.restarts(), "last")
                record("replay/evicted_trajectories", self.buffer.evicted_trajectories, "last")
                if cfg.eval.every > 0 and (
                    self.step % cfg.eval.every == 0 or self.step == cfg.training.steps
                ):
                    with self.profile.phase("eval"):
                        evals.append(await self._evaluate())
                if cfg.checkpoint.every > 0 and self.step % cfg.checkpoint.every == 0:
                    try:
                        with self.profile.phase("checkpoint"):
                            await self._save_checkpoint()
                    except ServiceRestarted:  # died while saving: back to the last complete one
                        self.counts["checkpoints_lost_to_trainer_restart"] += 1
                        continue
                for name, value in self.profile.step_metrics().items():
                    record(name, value, "last")
                self.history.append(self.metrics.flush(self.step))
                if cfg.metrics.plot_every and self.step % cfg.metrics.plot_every == 0:
                    self._plot()
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await producer
        self.counts["replay_evicted"] = self.buffer.evicted
        services = self.services.supervised
        for service in services:
            self.counts[f"restarts/{service.name}"] = service.restarts
        generator_busy = await self.services.generator_busy() - busy_at_start
        generator_busy -= self.timing.seconds["generator_busy_eval"]
        summary = {
            "steps": self.step,
            "policy_version": self.version,
            "wall_s": time.monotonic() - started,
            "timing": self.timing.fractions(generator_busy, len(self.services.generators)),
            "profile": self.profile.summary(),
            "evals": evals,
            "counts": dict(self.counts),
            "restarts": {s.name: s.causes for s in services if s.causes},
            "policy_path": str(self.policy_path),
            "resumed_from": self.resumed_from,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    async def _train_and_sync(self, batch: list[Trajectory]) -> dict[str, float]:
        """One trainer step, then (every `sync_interval` steps) the weight sync."""
        with self.timing.measure("trainer_busy"), self.profile.phase("train"):
            metrics = await self.services.call_trainer("train_step", batch)
        self.step += 1
        self.version = int(metrics.get("train/policy_version", self.version + 1))
        await self.buffer.set_version(self.version)
        if self.step % self.cfg.training.sync_interval == 0:
            with self.profile.phase("weight_sync"):
                await self._sync_weights()
        return metrics

    async def _take(self, producer: asyncio.Task) -> list[Group]:
        """The next batch; re-raises a crash of the rollout loop instead of waiting forever."""
        take = asyncio.create_task(
            self.buffer.take(self.cfg.training.groups_per_step, self.version)
        )
        done, _ = await asyncio.wait({take, producer}, return_when=asyncio.FIRST_COMPLETED)
        if take not in done:
            take.cancel()
            producer.result()  # raises the rollout loop's error
            raise RuntimeError("the rollout loop stopped")
        return take.result()

    async def _sync_weights(self) -> None:
        """Trainer -> weight store -> every generator replica, bounded in time."""
        from forge_agent.observability.metrics import record

        started = time.monotonic()
        version = await self.services.call_trainer("push_weights")
        # async (lag > 0): running requests continue on the new weights (partial rollouts);
        # sync: they finish on the old weights first (drain)
        partial = self.cfg.training.max_policy_lag > 0
        # a replica that dies or overruns training.weight_sync_timeout_s is replaced, and its
        # replacement loads `version` itself (see _generator_restarted)
        results = await asyncio.gather(
            *(
                g.update_weights.call_one(version, None, self.services.store, False, partial)
                for g in self.services.generators
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, ServiceRestarted):
                continue
            if isinstance(result, BaseException):
                raise result
        record("weight_sync/s", time.monotonic() - started)

    def _plot(self) -> None:
        """curves.png from metrics.jsonl so far (a failed plot never stops training)."""
        from forge_agent.observability.plots import plot_curves

        try:
            plot_curves(self.out / "metrics.jsonl", self.out / "curves.png")
        except Exception as exc:
            logger.warning("plotting curves failed: %s", exc)

    async def _evaluate(self) -> dict[str, float]:
        from forge_agent.evaluation import evaluate
        from forge_agent.observability.metrics import record

        self._gate.clear()  # no new training groups while evaluating
        busy = await self.services.generator_busy()
        try:
            with self.timing.measure("eval"):
                report = await evaluate(
                    self.eval_engine,
                    self.eval_tasks,
                    self.cfg.eval.k,
                    seed=self.cfg.seed,
                    score=self._score_agent_outcome if self.endpoint is not None else None,
                )
        finally:
            self._gate.set()
            self.timing.add("generator_busy_eval", await self.services.generator_busy() - busy)
        metrics = report.as_metrics()
        for name, value in metrics.items():
            record(name, value, "last")
        logger.info("eval at step %d: %s", self.step, metrics)
        print(f"[eval] step {self.step}: {_eval_line(metrics)}", flush=True)
        # wall_s: seconds of training so far, evaluation excluded (time-to-reward comparisons)
        return {"step": self.step, "wall_s": self.timing.loop_seconds(), **metrics}

    async def _score_agent_outcome(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """Eval episodes of an agent program get its own reward from a reward actor (the
        program's env gives none); shaping components are left out, as for env outcomes."""
        from forge_agent.observability.metrics import record

        try:
            scored, metrics = await self.services.rewards.score.choose(trajectories, [AGENT_REWARD])
        except Exception as exc:  # the reward service failed: the episodes stay unscored
            self.counts["reward_service_error"] += 1
            logger.warning("scoring eval episodes failed: %s", exc)
            return trajectories
        for name, value in metrics.items():  # e.g. eval/reward/agent_reward/correct
            record(f"eval/{name}", value)
        return list(scored)

    # ------------------------------------------------------------------ checkpoints
    async def _save_checkpoint(self) -> None:
        from forge_agent.trainer.checkpoint import prune_checkpoints

        path = self.out / "checkpoints" / f"step_{self.step:06d}"
        position = {
            "tasks": self.tasks.state(),
            "step": self.step,
            "replay": self.buffer.state_dict(),  # scored groups not yet trained on
        }
        await self.services.call_trainer("save_checkpoint", str(path), position)
        prune_checkpoints(self.out / "checkpoints", self.cfg.checkpoint.keep)

    async def _resume(self) -> None:
        from forge_agent.trainer.checkpoint import complete_checkpoints

        checkpoints = complete_checkpoints(self.out / "checkpoints")
        if not checkpoints:
            logger.info("resume: no checkpoint under %s; starting fresh", self.out)
            return
        path = checkpoints[-1]
        position = await self.services.call_trainer("load_checkpoint", str(path))
        self.tasks.load_state(position["tasks"])
        self.resumed_from = {k: v for k, v in position.items() if k != "replay"}
        self.step = int(position["step"])
        self.version = int(await self.services.call_trainer("policy_version"))
        if "replay" in position:  # the bound is re-checked against the resumed version
            self.buffer.load_state_dict(position["replay"], self.version)
        if self.version > 0:
            await self._sync_weights()
        print(f"[resume] {path.name}: step {self.step}, policy version {self.version}", flush=True)

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self) -> None:
        """Stop everything this controller started (actors, workers, sandboxes)."""
        from forge_agent.observability.plots import plot_curves
        from forge_agent.observability.trace_html import write_html
        from forge_agent.observability.traces import read_traces

        with contextlib.suppress(Exception):
            self.traces.close()
            records = read_traces(self.out / "traces.jsonl", last=self.cfg.metrics.traces_last)
            write_html(records, self.out / "traces.html", decode=self.decode)
        with contextlib.suppress(Exception):
            self.metrics.close()
            plot_curves(self.out / "metrics.jsonl", self.out / "curves.png")
        if self.endpoint is not None:
            with contextlib.suppress(Exception):
                await self.endpoint.stop()
        if self.services is not None:
            await self.services.shutdown()


def _eval_line(metrics: dict[str, float]) -> str:
    keys = ("eval/reward/mean", "eval/pass@1", "eval/tool_call_rate")
    return ", ".join(f"{k.split('/')[-1]} {metrics[k]:.3f}" for k in keys if k in metrics)


async def train(cfg: AgentConfig, generate_wrapper: GenerateWrapper | None = None) -> dict:
    """Build, run and always shut down a controller for `cfg`.

    Ctrl-C (SIGINT) and SIGTERM cancel the run and shut every actor, env worker and sandbox
    down. The handlers are installed after the actors are spawned: Monarch's runtime takes
    over SIGINT when its procs start, and then Python never sees it (seen here).
    """
    controller = Controller(cfg, generate_wrapper)
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    handled: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        print(
            f"\n[{sig.name}] stopping: shutting actors, env workers and sandboxes down", flush=True
        )
        if main_task is not None:
            main_task.cancel()

    try:
        await controller.setup()
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop, sig)
                handled.append(sig)
        return await controller.run()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await controller.shutdown()


__all__ = ["AGENT_REWARD", "Controller", "Status", "build_rubric", "train"]

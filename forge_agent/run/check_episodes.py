"""`--check`'s episodes: the env played once on the first training task and once on the first
held-out task, by a scripted policy that answers at once, through the run's own episode loop
(`RolloutRunner.run_episode`, in an env worker), so each ends with the status a run gives it;
then once more on the first training task by a scripted policy that calls each of the env's
tools (`CheckCaller`), and two of the warm start's demonstrations rendered as the warm start
renders them (`check_demonstrations`).

    check = check_episodes(cfg, report.env, renderer, report.train_tasks[:1], report.eval_tasks[:1])
    check.lines()  # ["episode (train, task calc-3): ok, reward 0 after 1 turn(s) ...", ...]
    check.failed   # the episodes that ended in a failure: `--check` then exits 2

The answer is a plain message (`CHECK_ANSWER`), so the env's reset, its step and its judge run
on a real task; an env that wants more turns gets the same answer again, up to
`rollout.max_turns`. A failure is named with the status a run would give it (the rule of blame,
docs/rewards.md) and the exception's text, so a judge that raises on every answer shows here,
not after the warm start. A seated game (a reset that returns a `SeatStart`) is played with
every seat answering the same (its reward is the first seat's); an agent program (it runs
against the policy's endpoint) is not played. An episode that ends in a failure (an env, judge
or step that raised; `Status.is_policy_failure` or `is_infra_failure`) fails the check: a run
would score every such episode the env's failure reward, or lose it.

The calling episode writes each call as the policy would sample it (the renderer's own call
format, as tokens: `warm_start.demos.assistant_tokens`), with arguments sampled from the
tool's schema, so the renderer's parser, the env's tools and their argument checks, and the
append-only bridge of a tool reply all run. It fails the check when the renderer does not
parse the call it wrote, when a reply could not be bridged append-only (a run would start a
new training segment every turn), or when the episode ends in a failure; a tool that answers
the sampled arguments with an error is reported, not failed (its reply is an observation).
A demonstration that cannot be rendered append-only fails the check (the warm start would
stop on it).

Two of the env's own `demonstrations()` are also replayed through the env, in the same env
worker (`replay_demonstrations`): reset on the demonstration's task, each of its assistant
turns stepped, and the env's replies compared with the demonstration's. A reply that differs,
a step that raises, or an episode the env ends before the demonstration does fails the check:
the warm start would teach replies the env never gives. A demonstration that carries no task
(the hook gives no `{"messages": ..., "task": ...}`) is replayed on two training tasks: where
the env answers both alike (its tools do not depend on the task: the calculator's) it is
checked against that; where they differ (a lookup in the task's own records) it is not
checked, and its line says so.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge_agent.env.demonstrations import Demonstration, env_demonstration_items, sampled_call
from forge_agent.env.pool import EnvPool
from forge_agent.env.protocol import env_seats
from forge_agent.env.registry import is_agent_program
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.rollout.runner import RolloutRunner
from forge_agent.run.setup_checks import build_env
from forge_agent.toolkit.toolset import ToolSet
from forge_agent.types import Completion, Message, Status, ToolSpec, Trajectory
from forge_agent.warm_start.config import DemoCap
from forge_agent.warm_start.demos import assistant_tokens, demo_trajectory, demonstrations
from forge_agent.warm_start.sft import played_turns

if TYPE_CHECKING:
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.run.config import AgentConfig

__all__ = [
    "CHECK_ANSWER",
    "REPLAYED_DEMONSTRATIONS",
    "CheckAnswer",
    "CheckCaller",
    "CheckedEpisode",
    "EpisodeCheck",
    "ReplayedDemonstration",
    "check_demonstrations",
    "check_episodes",
    "replay_demonstrations",
]

CHECK_ANSWER = "I do not know."
"""The scripted policy's every message."""


@dataclass
class CheckedEpisode:
    """How one `--check` episode ended: its status, its reward (None when it has none), turns
    played and the error text of a failure."""

    split: str
    task_id: str
    status: str
    reward: float | None = None
    turns: int = 0
    error: str = ""

    @property
    def failed(self) -> bool:
        """It ended in a failure, the policy's (the env raised on its answer) or infra's."""
        status = Status(self.status)
        return status.is_policy_failure or status.is_infra_failure

    def line(self) -> str:
        """One console line."""
        head = f"episode ({self.split}, task {self.task_id}): {self.status}"
        if self.error:
            return f"{head}: {self.error}"
        reward = "none" if self.reward is None else f"{self.reward:g}"
        return f"{head}, reward {reward} after {self.turns} turn(s) (reset, step and judge ran)"


class CheckAnswer:
    """The scripted policy of `--check`: a `GenerateFn` whose every turn is `CHECK_ANSWER`
    and the renderer's stop token."""

    def __init__(self, renderer: ChatRenderer) -> None:
        text = renderer.tokenizer.encode(CHECK_ANSWER, add_special_tokens=False)
        self.token_ids = [*text, renderer.stop_token_ids[0]]

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        ids = list(self.token_ids)
        return Completion(ids, [0.0] * len(ids), "stop", policy_version=0)


class CheckCaller:
    """The scripted policy of `--check`'s calling episode: turn k < len(tools) calls tool k
    with arguments sampled from its schema (and words of the task's prompt), written as the
    policy would sample it; then `CHECK_ANSWER`."""

    def __init__(self, renderer: ChatRenderer, tools: list[ToolSpec], prompt: str) -> None:
        rng = random.Random(0)
        user: Message = {"role": "user", "content": prompt}
        self.calls = [sampled_call(t, [user], rng, f"call_{k}") for k, t in enumerate(tools)]
        self.completions = [self._tokens(renderer, tools, call) for call in self.calls]
        self.completions.append(CheckAnswer(renderer).token_ids)
        self.turn = 0

    @staticmethod
    def _tokens(renderer: ChatRenderer, tools: list[ToolSpec], call: dict) -> list[int]:
        """`call` as the completion tokens the policy would sample (after a one-message
        context: the renderer writes a call the same way after any prompt)."""
        context: list[Message] = [{"role": "user", "content": "check"}]
        message: Message = {"role": "assistant", "content": "", "tool_calls": [call]}
        prompt = renderer.render_prompt(context, tools)
        return assistant_tokens(renderer, prompt, [*context, message], tools, "check call")

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        ids = list(self.completions[min(self.turn, len(self.completions) - 1)])
        self.turn += 1
        return Completion(ids, [0.0] * len(ids), "stop", policy_version=0)


@dataclass
class CheckedCalls:
    """How `--check`'s calling episode went: each scripted call and the env's reply, and what
    failed (empty: the renderer parsed and bridged every call and the episode ended well)."""

    task_id: str
    status: str
    calls: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"tool calls (train, task {self.task_id}): {self.status}"
        verdict = "; ".join(self.problems) or "each parsed, run and bridged append-only"
        return [f"{head}, {len(self.calls)} call(s): {verdict}", *(f"  {c}" for c in self.calls)]


def checked_calls(task: dict[str, Any], caller: CheckCaller, traj: Trajectory) -> CheckedCalls:
    """What the calling episode `traj` of `task` showed (see `CheckedCalls`)."""
    task_id = str(task.get("task_id", "?"))
    report = CheckedCalls(task_id, traj.status.value)
    messages = list(traj.messages)
    replies = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    made = [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    for call in made:
        fn = call.get("function", {})
        reply = replies.get(call.get("id"))
        text = str(reply.get("content", "")) if reply else "(no reply)"
        report.calls.append(f"{fn.get('name')}({fn.get('arguments')}) -> {text[:80]!r}")
        if call.get("parse_error"):
            report.problems.append(
                f"the renderer did not parse the call it wrote ({call['parse_error']})"
            )
    if len(made) < min(len(caller.calls), len(traj.turn_spans)):
        report.problems.append(
            f"{len(caller.calls)} call(s) written, {len(made)} parsed as calls (the renderer "
            "reads its own call format as text)"
        )
    if len(traj.segment_starts) > 1:
        report.problems.append(
            f"{len(traj.segment_starts) - 1} tool reply(ies) could not be bridged append-only "
            "(a run would start a new training segment at each)"
        )
    if traj.status.is_policy_failure or traj.status.is_infra_failure:
        report.problems.append(str(traj.info.get("error", "")) or f"ended {traj.status.value}")
    return report


def check_demonstrations(
    env: ResolvedEnv, renderer: ChatRenderer, n: int = 2, cap: DemoCap | None = None
) -> list[str]:
    """Problems rendering `n` of the warm start's demonstrations of `env` as the warm start
    does (append-only, through `renderer`, cut to the run's episode limits `cap`); [] when
    they render, or when the env has none."""
    try:
        convos, tools = demonstrations(env, n, 1.0, 0, played_turns(cap))
    except Exception:  # no demonstrations, or a broken hook: the setup check names that one
        return []
    problems = []
    for k, convo in enumerate(convos[:n]):
        try:
            demo_trajectory(renderer, convo, tools, f"demonstration {k}", cap)
        except (ValueError, StopIteration) as exc:
            problems.append(f"demonstration {k}: {exc}")
    return problems


REPLAYED_DEMONSTRATIONS = 2
"""The env's own demonstrations `--check` replays through the env."""


@dataclass
class ReplayedDemonstration:
    """How one of the env's demonstrations replayed through the env: on which task(s), what
    the env did differently (`problem`: fails the check) or why it was not checked (`note`)."""

    index: int
    where: str
    turns: int = 0
    reward: float | None = None
    problem: str = ""
    note: str = ""

    def line(self) -> str:
        head = f"demonstration {self.index} ({self.where})"
        if self.problem:
            return f"{head}: {self.problem}"
        if self.note:
            return f"{head}: not checked: {self.note}"
        reward = "" if self.reward is None else f", reward {self.reward:g}"
        return (
            f"{head}: replayed through the env, {self.turns} turn(s), each reply the env's "
            f"own{reward}"
        )


@dataclass
class _Replay:
    """What the env replied to a demonstration's assistant turns: per turn the contents of the
    messages it sent back, its reward once done, or the error a reset or step raised."""

    replies: list[list[str]] = field(default_factory=list)
    done_after: int | None = None
    reward: float | None = None
    error: str = ""


async def _replay(pool: EnvPool, task: dict[str, Any], messages: list[Message]) -> _Replay:
    """Reset an env of `pool` on `task` and step each assistant turn of `messages`."""
    out, reset = _Replay(), False
    lease = await pool.acquire()
    try:
        await lease.reset(task, 0)
        reset = True
        turns = [m for m in messages if m.get("role") == "assistant"]
        for k, turn in enumerate(turns):
            result = await lease.step(dict(turn))
            out.replies.append([str(m.get("content") or "") for m in result.messages])
            if result.done:
                out.done_after = k + 1
                out.reward = float(sum(result.rewards.values()))
                break
    except Exception as exc:  # the demonstration's turn made the env fail: say which
        where = f"turn {len(out.replies) + 1}" if reset else "reset"
        out.error = f"the env raised on its {where}: {type(exc).__name__}: {exc}"[:300]
    finally:
        await lease.close()
    return out


def _demonstrated_replies(messages: list[Message]) -> list[list[str]]:
    """Per assistant turn of `messages`, the contents of the messages after it (until the
    next assistant turn): the replies the demonstration says the env gave."""
    out: list[list[str]] = []
    for m in messages:
        if m.get("role") == "assistant":
            out.append([])
        elif out:
            out[-1].append(str(m.get("content") or ""))
    return out


def _difference(demo: list[Message], replay: _Replay) -> str:
    """What of `replay` differs from the demonstration `demo` ("" when nothing does)."""
    if replay.error:
        return replay.error
    said = _demonstrated_replies(demo)
    for k, (theirs, ours) in enumerate(zip(said, replay.replies, strict=False)):
        if theirs != ours:
            return (
                f"turn {k + 1}'s reply differs from the env's: {_short(theirs)} in the "
                f"demonstration, {_short(ours)} from the env (the warm start would teach a "
                "reply the env never gives)"
            )
    if replay.done_after is not None and replay.done_after < len(said):
        return (
            f"the env ended the episode after turn {replay.done_after} of the demonstration's "
            f"{len(said)}"
        )
    return ""


def _short(contents: list[str]) -> str:
    text = " | ".join(contents)
    return repr(text if len(text) <= 80 else text[:77] + "...")


async def replay_demonstrations(
    pool: EnvPool, items: list[Demonstration], tasks: list[dict[str, Any]]
) -> list[ReplayedDemonstration]:
    """Each demonstration of `items` replayed through an env of `pool` (see the module's
    docstring): on its own task, or, when it carries none, on the first two of `tasks`; those
    are checked only where the env answers every such demonstration alike on both (a tool
    that answers from the task's own data, a table or a database, answers each task its own
    way, and a demonstration of another task cannot be checked against it)."""
    out: list[ReplayedDemonstration] = []
    taskless: list[tuple[ReplayedDemonstration, list[Message], list[_Replay]]] = []
    ids = [str(t.get("task_id", "?")) for t in tasks[:2]]
    for k, ((messages, _), task) in enumerate(items):
        if task is not None:
            replay = await _replay(pool, task, messages)
            report = ReplayedDemonstration(
                k, f"task {task.get('task_id', '?')}, its own", len(replay.replies), replay.reward
            )
            report.problem = _difference(messages, replay)
        elif not tasks:
            report = ReplayedDemonstration(k, "carries no task", note="no training task to run")
        else:
            replays = [await _replay(pool, t, messages) for t in tasks[:2]]
            report = ReplayedDemonstration(k, "carries no task", len(replays[0].replies))
            taskless.append((report, messages, replays))
        out.append(report)
    per_task = any(
        (r[0].replies, r[0].error) != (r[-1].replies, r[-1].error) for _, _, r in taskless
    )
    for report, messages, replays in taskless:
        if per_task:
            report.note = (
                f"the env's replies differ between training tasks {ids[0]} and {ids[1]} (its "
                "tools answer per task); give each demonstration its task (demonstrations() "
                'may give {"messages": ..., "task": ...}) to check it'
            )
        elif len(replays) == 2:
            report.where += f": replayed on training tasks {ids[0]} and {ids[1]}, answered alike"
            report.problem = _difference(messages, replays[0])
        else:  # one task: a difference cannot be told from the task's doing
            report.where += f": replayed on training task {ids[0]} only"
            if difference := _difference(messages, replays[0]):
                report.note = f"{difference}; with one training task, not told from the task's"
    return out


def env_tools(env: ResolvedEnv) -> list[ToolSpec] | None:
    """The tool specs of `env` before a reset (its Python tools); None when it has them only
    after one (an MCP server's, a Gymnasium game's)."""
    get_tools = getattr(build_env(env), "get_tools", None)
    try:
        return ToolSet(get_tools()).specs if callable(get_tools) else None
    except Exception:
        return None


def checked(split: str, task: dict[str, Any], traj: Trajectory) -> CheckedEpisode:
    """How the episode `traj` of `task` ended, as `--check` reports it."""
    error = str(traj.info.get("error", ""))
    reward = None if traj.status.is_infra_failure else traj.reward
    turns = len(traj.turn_spans)
    task_id = str(task.get("task_id", "?"))
    return CheckedEpisode(split, task_id, traj.status.value, reward, turns, error)


@dataclass
class EpisodeCheck:
    """`--check`'s episodes: those played, or why none was (`not_played`)."""

    episodes: list[CheckedEpisode] = field(default_factory=list)
    not_played: str = ""
    calls: CheckedCalls | None = None
    calls_not_played: str = ""
    demo_problems: list[str] = field(default_factory=list)
    replayed: list[ReplayedDemonstration] = field(default_factory=list)
    replay_not_played: str = ""

    @property
    def failed(self) -> list[CheckedEpisode]:
        """The episodes that ended in a failure (`CheckedEpisode.failed`)."""
        return [e for e in self.episodes if e.failed]

    @property
    def problems(self) -> list[str]:
        """What failed besides the episodes: the calling episode's and the demonstrations'."""
        calls = self.calls.problems if self.calls is not None else []
        replayed = [f"{r.line()}" for r in self.replayed if r.problem]
        return [*calls, *self.demo_problems, *replayed]

    def lines(self) -> list[str]:
        """One console line per episode (or the reason none was played)."""
        if self.not_played:
            return [self.not_played]
        lines = [e.line() for e in self.episodes]
        lines += self.calls.lines() if self.calls is not None else [self.calls_not_played]
        if self.demo_problems:
            lines += [f"warm start: {p}" for p in self.demo_problems]
        lines += [r.line() for r in self.replayed] or [self.replay_not_played]
        return [line for line in lines if line]


def check_episodes(
    cfg: AgentConfig,
    env: ResolvedEnv,
    renderer: ChatRenderer,
    train: list[dict[str, Any]],
    held_out: list[dict[str, Any]],
    replay_tasks: list[dict[str, Any]] | None = None,
) -> EpisodeCheck:
    """Each task of `train` and of `held_out` played once by `CheckAnswer` through the run's
    episode loop (`RolloutRunner.run_episode`), in an env worker built from `env` (`cfg.env`
    as `check_setup` resolved it); `renderer`: the policy's. A seated game has every seat
    played by the scripted policy; the report is the first seat's. Then the calling episode,
    and `REPLAYED_DEMONSTRATIONS` of the env's demonstrations replayed through the env (those
    without a task on the first two of `replay_tasks`, default `train`)."""

    if is_agent_program(cfg.env.id):
        return EpisodeCheck(
            not_played=f"episodes: not played by --check ({cfg.env.id!r} is an agent program: "
            "it needs the policy's endpoint)"
        )
    players = dict.fromkeys(env_seats(env.factory())) or None  # every seat: the policy
    tools = env_tools(env) if players is None else None
    check = EpisodeCheck()
    if players is not None:
        check.calls_not_played = "tool calls: not played by --check (a seated game)"
    elif tools is None:
        check.calls_not_played = (
            "tool calls: not played by --check (the env offers its tools only at reset)"
        )
    elif not tools:
        check.calls_not_played = "tool calls: none (the env offers no tools)"
    items = None
    if players is not None:
        check.replay_not_played = "demonstrations: not replayed by --check (a seated game)"
    else:
        try:
            items = env_demonstration_items(env.make(), REPLAYED_DEMONSTRATIONS, 0, 1.0)
        except Exception:  # a broken hook: the setup check names it (demonstration_source)
            items = None
        if not items:
            check.replay_not_played = (
                "demonstrations: none of the env's own to replay (the warm start samples "
                "calls from its tool schemas, or has none)"
            )

    async def play() -> None:
        async with EnvPool(env, size=1) as pool:
            runner = RolloutRunner(
                CheckAnswer(renderer), pool, renderer, cfg.rollout, players=players
            )
            for split, tasks in (("train", train), ("held-out", held_out)):
                for task in tasks:
                    trajs = await runner.run_episode(task, 0)
                    check.episodes.append(checked(split, task, trajs[0]))
            if tools and train:
                caller = CheckCaller(renderer, tools, str(train[0].get("prompt", "")))
                calling = RolloutRunner(caller, pool, renderer, cfg.rollout)
                (traj,) = await calling.run_episode(train[0], 0)
                check.calls = checked_calls(train[0], caller, traj)
            if items:
                tasks = train if replay_tasks is None else replay_tasks
                check.replayed = await replay_demonstrations(pool, items, tasks)

    asyncio.run(play())
    if cfg.warm_start.enabled:
        check.demo_problems = check_demonstrations(env, renderer, cap=DemoCap.of(cfg.rollout))
    return check

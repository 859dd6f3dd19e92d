"""The reward-hack suite's judge cases: answers that attack the scorer reading them.

Several reasoning-gym scorers `eval` the answer (spiral_matrix, string_insertion, binary_matrix,
n_queens) or `sympy.parse_expr` it. They ran in the env worker, on the host, as root; now each
verdict runs in the judge server's forked sandbox (`forge_agent.rewards.judge`). Everything
here is real: a scripted policy, the rollout engine, env worker processes, reasoning-gym.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from forge_agent.env import EnvConfig
from forge_agent.env.pool import EnvPool
from forge_agent.env.protocol import step_failure
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.rewards.judge import JudgeError, JudgeTimeout
from forge_agent.types import Status
from tests import sandboxed_scorers
from tests.helpers import SaysPolicy

SPIRAL = "reasoning_gym:spiral_matrix"


def _task() -> dict:
    return load_tasks(ResolvedEnv.of(SPIRAL), "train", 1, seed=0)[0]


async def _episodes(tokenizer, pool, answers: list[tuple[str, float]]) -> list:
    """One episode per (answer, delay), run side by side on `pool`."""
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner

    task = _task()

    def engine(text: str, delay_s: float) -> RolloutRunner:
        policy = SaysPolicy(tokenizer, f"<answer>{text}</answer>", delay_s)
        config = RolloutConfig(max_turns=1, max_total_tokens=4096, max_new_tokens_per_turn=512)
        return RolloutRunner(policy, pool, ChatRenderer(tokenizer), config)

    runs = [engine(text, delay).run_episode(task, 0) for text, delay in answers]
    return [traj for (traj,) in await asyncio.gather(*runs)]


def _play(tokenizer, answers, size=1, envs_per_worker=1, **config):
    async def go():
        env = EnvConfig(SPIRAL, {}, close_timeout_s=3.0, **config)
        async with EnvPool(ResolvedEnv.of(env), size=size, envs_per_worker=envs_per_worker) as pool:
            return await _episodes(tokenizer, pool, answers)

    return asyncio.run(go())


def test_an_answer_a_scorer_evals_cannot_write_a_host_file(tiny_tokenizer, tmp_path):
    """Before: spiral_matrix's `eval` ran the answer in the env worker, which wrote the file."""
    target = tmp_path / "written_by_the_policy"
    attack = f"__import__('pathlib').Path('{target}').write_text('x')"
    (traj,) = _play(tiny_tokenizer, [(attack, 0.0)])
    assert not target.exists()
    assert traj.reward == 0.0 and traj.status in (Status.OK, Status.POLICY_ERROR)


def test_an_answer_that_shadows_a_builtin_changes_no_later_verdict(tiny_tokenizer):
    """Before: an answer that replaced `float` in the worker made it pay 1.0 for every later
    wrong answer of that worker."""
    shadow = (
        "(lambda f: __import__('builtins').__setattr__('float', "
        "type('F', (f,), {'__new__': lambda c, *a: f.__new__(f, 1.0)})))(float)"
    )

    async def go():
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(SPIRAL, {}, close_timeout_s=3.0)), size=1
        ) as pool:
            (first,) = await _episodes(tiny_tokenizer, pool, [(shadow, 0.0)])
            (later,) = await _episodes(tiny_tokenizer, pool, [("1 2 3", 0.0)])  # same worker
            return first, later

    first, later = asyncio.run(go())
    assert first.status is not Status.ENV_ERROR and first.reward == 0.0
    assert later.status is Status.OK and later.reward == 0.0


FORGERIES = {
    "patch-the-reply-encoder": "__import__('sys').modules['json'].__setattr__("
    "'dumps', lambda *a, **k: '{\"ok\": true, \"value\": 1.0}')",
    "write-the-reply-pipe": "[__import__('os').write(f, b'{\"ok\": true, \"value\": 1.0}') "
    "for f in range(3, 8) if __import__('os').path.exists('/proc/self/fd/%d' % f)] "
    "and __import__('os')._exit(0)",
}


@pytest.mark.parametrize("attack", list(FORGERIES.values()), ids=list(FORGERIES))
def test_an_answer_cannot_forge_its_own_verdict_inside_the_judge(tiny_tokenizer, attack):
    """The sandbox runs the answer in the process that computes its verdict: without the eval
    guard (`forge_agent.rewards.eval_guard`) both answers were paid 1.0 for a wrong answer."""
    (traj,) = _play(tiny_tokenizer, [(attack, 0.0)])
    assert traj.reward == 0.0 and traj.status is Status.OK, traj.info


def test_an_answer_that_exits_its_judge_earns_nothing_and_harms_no_neighbour(tiny_tokenizer):
    """Before: the answer exited the env worker: `env_error` (excluded) for it and for the
    episode beside it on the same worker."""
    right = _task()["answer"]
    kill = "__import__('os')._exit(3)"
    killed, neighbour = _play(
        tiny_tokenizer, [(kill, 0.0), (right, 0.5)], size=2, envs_per_worker=2
    )
    assert killed.status is not Status.ENV_ERROR and killed.reward == 0.0, killed.info
    assert neighbour.status is Status.OK and neighbour.reward == 1.0


def test_a_judge_that_computes_forever_delays_no_other_episode(tiny_tokenizer):
    """Before: `9**9**9` held the worker's GIL, so the episode beside it timed out too and was
    blamed on its own policy (`policy_timeout`, reward 0)."""
    right = _task()["answer"]
    hog, neighbour = _play(
        tiny_tokenizer,
        [("9**9**9", 0.0), (right, 0.3)],
        size=2,
        envs_per_worker=2,
        step_timeout_s=2.5,
    )
    assert hog.status is Status.POLICY_TIMEOUT
    assert neighbour.status is Status.OK and neighbour.reward == 1.0


def test_a_sandboxed_user_scorer_gives_its_verdict_and_reaches_no_host_file(tmp_path):
    entry = {"answer": 6}
    assert asyncio.run(sandboxed_scorers.evals_the_answer("2 * 3", entry)) == 1.0
    target = tmp_path / "x"
    attack = f"open('{target}', 'w').write('x') and 6"
    with pytest.raises(JudgeError) as failure:  # the folder does not exist in the sandbox
        asyncio.run(sandboxed_scorers.evals_the_answer(attack, entry))
    assert not target.exists()
    assert step_failure(failure.value, None)[0] is Status.POLICY_ERROR


def test_a_sandboxed_scorer_that_dies_on_the_answer_is_the_policys_failure():
    with pytest.raises(JudgeError, match="died") as failure:
        asyncio.run(sandboxed_scorers.dies_on("die", {}))
    assert step_failure(failure.value, None)[0] is Status.POLICY_ERROR
    assert asyncio.run(sandboxed_scorers.dies_on("live", {})) == 1.0  # the server lives on


def test_a_sandboxed_scorer_past_its_limit_is_the_policys_timeout():
    with pytest.raises(JudgeTimeout) as failure:
        asyncio.run(sandboxed_scorers.evals_the_answer_briefly("9**9**9", {"answer": 1}))
    assert step_failure(failure.value, None) == (Status.POLICY_TIMEOUT, 0.0)


@pytest.fixture
def shared_host_folder():
    """A world-writable folder on the host outside /tmp (which every sandbox replaces), as
    `/run/lock` is on Debian."""
    folder = Path(tempfile.mkdtemp(dir="/run" if os.access("/run", os.W_OK) else "."))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def test_the_forked_sandbox_cannot_write_to_a_world_writable_host_folder(shared_host_folder):
    """Before: the forked sandbox (judges, verifiers tools) left host folders that are
    world-writable (`/run/lock`) writable, so a file left by one episode was read by the
    next."""
    from forge_agent.sandbox.base import Limits
    from forge_agent.sandbox.forked import run_forked

    target = shared_host_folder / "left_behind"
    reply = run_forked(functools.partial(target.write_text, "x"), Limits(wall_s=5.0))
    assert not reply["ok"], reply  # the folder is read-only, or (covered) not there at all
    assert "Read-only file system" in reply["error"] or "No such file" in reply["error"]
    assert not target.exists()


def _unshare_user_namespace() -> int:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).unshare(0x10000000)  # CLONE_NEWUSER


def test_code_in_the_forked_sandbox_runs_under_the_seccomp_filter():
    """Before: the forked sandbox (judges, verifiers tools) had no seccomp filter: its code
    could make new namespaces, ptrace, or use io_uring like no other sandbox's."""
    from forge_agent.sandbox.base import Limits
    from forge_agent.sandbox.forked import run_forked

    reply = run_forked(_unshare_user_namespace, Limits(wall_s=5.0))
    assert reply == {"ok": True, "value": -1}


@pytest.fixture
def readable_answer_key():
    """An answer key any user may read, in a host folder outside the judge's allow-list."""
    folder = Path(tempfile.mkdtemp(dir="/srv" if os.access("/srv", os.W_OK) else "/var/tmp"))
    folder.chmod(0o755)
    key = folder / "answers.txt"
    key.write_text("42")
    key.chmod(0o644)
    yield key
    shutil.rmtree(folder)


def test_the_forked_sandbox_cannot_read_a_world_readable_host_file(readable_answer_key):
    """Before (main 475abf9): the forked sandbox (judges, verifiers tools) read every host file
    any user may read, an answer key left world-readable among them. Its readable paths are
    now an allow-list (the system's folders and the interpreter's): the file is not there."""
    from forge_agent.sandbox.base import Limits
    from forge_agent.sandbox.forked import run_forked

    reply = run_forked(readable_answer_key.read_text, Limits(wall_s=5.0))
    assert not reply["ok"] and "No such file" in reply["error"], reply
    shared = run_forked(Path("/usr/lib/os-release").exists, Limits(wall_s=5.0))
    assert shared == {"ok": True, "value": True} or not Path("/usr/lib/os-release").exists()


def test_without_root_the_forked_sandbox_refuses_clearly_and_runs_nothing(monkeypatch, tmp_path):
    """A non-root user gets a `SandboxError` naming what is missing (the judge server turns
    it into infra, `JudgeServerError`), never the function run unsandboxed."""
    from forge_agent.sandbox.base import Limits, SandboxError
    from forge_agent.sandbox.forked import run_forked

    target = tmp_path / "ran"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError, match=r"needs root .* uid 1000"):
        run_forked(functools.partial(target.write_text, "x"), Limits(wall_s=5.0))
    assert not target.exists()


def _adversarial(task: str, entry: dict) -> list[str]:
    """Answers that are not solutions, or not in the task's form: the question restated, its
    unevaluated forms, digit-free constants, functions of the numbers, other numbers."""
    meta, key = entry["metadata"], str(entry["answer"])
    corpus = [entry["question"]]
    if task == "puzzle24":
        others = ("6*4*1*1", "8*3*1*1", "2*3*4*1", "(9-3)*(5-1)")
        numbers = sorted(meta["numbers"])
        corpus += [a for a in others if sorted(map(int, re.findall(r"\d+", a))) != numbers]
    if task == "countdown":
        corpus += [f"{key} + E - E", f"floor({key} + E/pi)", f"({key})*(pi/pi)"]
    if task in ("simple_integration", "intermediate_integration"):
        var, integrand = meta["variable"], meta["integrand"]
        corpus += [f"Integral({integrand}, {var})", f"integrate({integrand}, {var}) + C",
                   f"Integral({integrand}, {var}).doit()"]  # fmt: skip
    if task == "polynomial_multiplication":
        question = meta["polynomial_expr"]
        corpus.append(f"expand({question})")
        if question.replace(" ", "") != key.replace(" ", ""):  # a question already expanded
            corpus.append(question)
    return corpus


STRICT_TASKS = {"puzzle24": 0.01, "countdown": 0.05, "simple_integration": 0.0,
                "intermediate_integration": 0.0, "polynomial_multiplication": 0.0}  # fmt: skip


@pytest.mark.parametrize("task", list(STRICT_TASKS))
def test_class5_split_scorers_are_as_strict_as_the_task(task):
    """A differential harness: honest answers (reasoning-gym's own dataset answers) pay what
    reasoning-gym pays (1.0); an adversarial corpus pays no more than the task's own score for
    a wrong answer, even where reasoning-gym's scorer pays 1.0 (before, c257d3d: the split
    paid it too): puzzle24 took four other numbers that make 24, countdown digit-free
    constants and functions of the numbers, the integration tasks the question's own
    `Integral` and `integrate(...)`, polynomial_multiplication `expand(<the question>)`."""
    import reasoning_gym

    from forge_agent.env.adapters.reasoning_gym import extract_answer
    from tests.test_reasoning_gym_scorers import _verdicts

    dataset = reasoning_gym.create_dataset(task, seed=2, size=3)
    entries = list(dataset)
    tasks = [{"prompt": e["question"], "answer": str(e["answer"]), "entry": e} for e in entries]
    corpus = [[str(e["answer"]), *_adversarial(task, e)] for e in entries]
    upstream = [
        [float(dataset.score_answer(extract_answer(f"<answer>{a}</answer>"), e)) for a in given]
        for e, given in zip(entries, corpus, strict=True)
    ]
    split = _verdicts(f"reasoning_gym:{task}", tasks, corpus)
    floor = STRICT_TASKS[task]
    for answers, theirs, ours in zip(corpus, upstream, split, strict=True):
        assert ours[0] == theirs[0] == 1.0, (answers[0], theirs[0], ours[0])
        assert all(v <= floor for v in ours[1:]), list(zip(answers[1:], ours[1:], strict=True))
    paid_upstream = sum(v == 1.0 for row in upstream for v in row[1:])
    assert paid_upstream >= len(entries), f"reasoning-gym paid {paid_upstream} of the corpus"


def _hold_processes() -> int:
    import time

    for _ in range(7):
        if os.fork() == 0:
            time.sleep(4)
            os._exit(0)
    time.sleep(2.0)
    return 7


def _fork_once() -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "forked"


def _fork_bomb() -> int:
    import time

    made = 0
    try:
        for _ in range(200):
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            made += 1
    except OSError:
        return made
    return made


def test_class8_one_calls_processes_never_fail_another_calls_fork():
    """Before (c257d3d): every forked call (judges, verifiers tools) ran as the one sandbox uid
    under RLIMIT_NPROC, a count shared host-wide: a call holding 8 processes made another
    call's single fork fail (`EAGAIN`). Now each call runs as a uid of its own
    (`CALL_UID_BASE` + its timing process's host pid), so its RLIMIT_NPROC counts its own
    processes: the second call forks, and a fork bomb is still stopped at its own bound."""
    import select
    import time

    from forge_agent.sandbox.base import Limits
    from forge_agent.sandbox.forked import ForkedCall, run_forked

    limits = Limits(wall_s=10.0, max_procs=8)
    holder = ForkedCall(_hold_processes, limits)
    time.sleep(0.7)  # its seven children are up
    assert run_forked(_fork_once, limits) == {"ok": True, "value": "forked"}
    bomb = run_forked(_fork_bomb, limits)
    assert bomb["ok"] and bomb["value"] <= limits.max_procs + 4, bomb
    while True:
        ready, _, _ = select.select([holder], [], [], 0.1)
        if ready and holder.read():
            break
    assert holder.result() == {"ok": True, "value": 7}

"""Sandboxed judges: a scorer that reads the policy's text runs in a forked sandbox, never in
the env worker; the worker receives only its verdict (a number).

A scorer is a function ``score(answer: str, entry) -> float``. Scorers that ``eval`` or
``sympy.parse_expr`` the answer (several reasoning-gym tasks) run what the policy wrote; in the
env worker that was the host, as root: an answer wrote host files, shadowed ``float`` for every
later episode of the worker, killed the worker, or held its GIL (``9**9**9``) so the worker's
other episodes timed out. Here:

- one **judge server** per process that judges (`judge_server()`: a child process of the env
  worker, started on first use) imports the scorers once and keeps them warm;
- each verdict is one call in a **forked sandbox** of that server (`forge_agent.sandbox.forked`:
  new PID, network and mount namespaces, the host read-only, fresh tmpfs, rlimits, the sandbox
  user, killed at `JUDGE_LIMITS.wall_s`); calls run side by side, each in its own process with
  its own time limit, so one episode's judge cannot delay, kill or change another's;
- the verdict is computed where the answer runs, so the child guards `eval` and `compile`
  first (`forge_agent.rewards.eval_guard`): the answer computes a value, not code;
- what goes in: the scorer's identity (`ScorerRef`: an importable factory and its arguments),
  the answer and the task entry it needs; what comes back: ``{"ok": true, "value": <number>}``
  or the reason it failed, as JSON (nothing from the sandbox is unpickled);
- a scorer split in two (`JudgeServer.value`) keeps the answer key out: its sandboxed side is
  given the answer and what the question states, and reports what the answer computes as
  plain JSON data (a number, a string, a list); the caller compares that with the key
  (reasoning-gym's evaluating scorers: `forge_agent.rewards.reasoning_gym_scorers`);
- a verdict that is not a finite number, a scorer that raises, dies or runs out of memory is
  the policy's failure (`JudgeError`, `policy_error`); one past its time limit is
  `JudgeTimeout` (`policy_timeout`); a server that does not start or dies is infra
  (`JudgeServerError`).

An env's own scorer asks for it with `sandboxed_scorer`:

    @sandboxed_scorer                  # a module-level function, importable by the server
    def exact(answer: str, entry: dict) -> float:
        return float(eval(answer) == entry["answer"])

    class MyEnv(ToolEnv):
        async def judge(self, answer):
            return {"correct": await exact(answer, self.task)}

Cost: 30-50 ms per verdict on a warm server, on a busy 2-core machine (docs/rewards.md,
`python -m apps.bench.judge_cost`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import itertools
import json
import math
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forge_agent.errors import InfraError, PolicyTimeout
from forge_agent.rewards import eval_guard
from forge_agent.sandbox.base import Limits, SandboxError
from forge_agent.sandbox.forked import ForkedCall

__all__ = [
    "JUDGE_LIMITS",
    "JudgeError",
    "JudgeServerError",
    "JudgeTimeout",
    "SandboxedScorer",
    "ScorerRef",
    "judge_server",
    "sandboxed_scorer",
]

JUDGE_LIMITS = Limits(wall_s=15.0, cpu_s=15.0, memory_mb=1024, max_procs=16, file_size_mb=16)
"""Limits of one verdict (its wall time is below the default 30 s step)."""
START_TIMEOUT_S = 60.0
REPLY_MARGIN_S = 15.0  # past the call's wall time, a missing reply is the server's failure
_SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")
_REPLY_MAX = 65_536  # a reply line: a verdict, or a value (1,000 sorted numbers are ~20 kB)
_VALUE_NODES = 100_000  # the most parts a value may have (lists, dicts, scalars)

Scorer = Callable[[Any, Any], Any]


class JudgeError(Exception):
    """The scorer failed on the policy's answer (raised, died, out of memory, no number):
    the policy's failure (`policy_error`)."""


class JudgeTimeout(PolicyTimeout):
    """The scorer ran past its time limit on the policy's answer (`policy_timeout`)."""


class JudgeServerError(InfraError):
    """The judge server did not start, died, or could not sandbox a call (infra)."""


@dataclass(frozen=True)
class ScorerRef:
    """Which scorer to run: ``factory`` ("module:function", importable by the server) called
    with ``args`` (picklable) gives ``score(answer, entry)``; the server builds it once."""

    factory: str
    args: tuple[Any, ...] = ()


# ---------------------------------------------------------------------- the client
class JudgeServer:
    """The client of one judge server process (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[Any, concurrent.futures.Future[dict[str, Any]]]] = {}
        self._ids = itertools.count()

    def submit(
        self,
        ref: ScorerRef,
        answer: object,
        entry: dict[str, Any],
        limits: Limits = JUDGE_LIMITS,
        build_only: bool = False,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Send one call (or, `build_only`, have the server build the scorer); the future's
        result is the server's JSON reply."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        request = {
            "ref": (ref.factory, ref.args),
            "answer": answer,
            "entry": entry,
            "limits": limits.to_dict(),
            "build_only": build_only,
        }
        with self._lock:
            proc = self._started()
            call_id = next(self._ids)
            request["id"] = call_id
            data = pickle.dumps(request)
            self._pending[call_id] = (proc, future)
            try:
                assert proc.stdin is not None
                proc.stdin.write(struct.pack("<I", len(data)) + data)
                proc.stdin.flush()
            except OSError as exc:
                self._pending.pop(call_id, None)
                future.set_exception(JudgeServerError(f"the judge server is gone: {exc}"))
        return future

    async def score(
        self, ref: ScorerRef, answer: object, entry: dict[str, Any], limits: Limits = JUDGE_LIMITS
    ) -> float:
        """The verdict of `ref` on `answer`; raises `JudgeError`, `JudgeTimeout` (the
        policy's) or `JudgeServerError` (infra)."""
        return verdict(await self._reply(ref, answer, entry, limits), ref)

    async def value(
        self, ref: ScorerRef, answer: object, entry: dict[str, Any], limits: Limits = JUDGE_LIMITS
    ) -> Any:
        """What `ref` computes from `answer`, as JSON data (a split scorer's sandboxed side:
        the caller compares it with the key); raises as `score` does, but for the number."""
        return _value(await self._reply(ref, answer, entry, limits), ref)

    async def score_metrics(
        self, ref: ScorerRef, answer: object, entry: dict[str, Any], limits: Limits = JUDGE_LIMITS
    ) -> dict[str, float]:
        """The verdict of a scorer that gives named numbers (a rubric's metrics); raises as
        `score` does."""
        return metrics_verdict(await self._reply(ref, answer, entry, limits), ref)

    async def _reply(
        self, ref: ScorerRef, answer: object, entry: dict[str, Any], limits: Limits
    ) -> dict:
        future = self.submit(ref, answer, entry, limits)
        try:
            reply = await asyncio.wait_for(
                asyncio.wrap_future(future), float(limits.wall_s) + REPLY_MARGIN_S
            )
        except TimeoutError:
            waited = float(limits.wall_s) + REPLY_MARGIN_S
            raise JudgeServerError(
                f"the judge server gave no verdict within {waited:g} s"
            ) from None
        return reply

    async def prepare(self, ref: ScorerRef, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the server and build `ref`'s scorer there now (idempotent): an env prepares
        at reset, so neither counts against a step's deadline. Raises `JudgeServerError`."""
        await asyncio.to_thread(self.start)
        future = self.submit(ref, None, None, JUDGE_LIMITS, build_only=True)
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            raise JudgeServerError(f"{ref.factory} was not built within {timeout_s:g} s") from None
        if "infra" in reply:
            raise JudgeServerError(f"judge sandbox: {reply['infra']}")

    def start(self) -> None:
        """Start the server now, if it is not running (blocking; idempotent)."""
        with self._lock:
            self._started()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        env = {k: v for k, v in os.environ.items() if not any(m in k for m in _SECRET_MARKERS)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "forge_agent.rewards.judge"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        if not line.startswith(b'{"ready"'):
            proc.kill()
            proc.wait()
            said = line.decode(errors="replace")[:300] or "no answer"
            raise JudgeServerError(f"the judge server did not start: {said}")
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand each reply line to its call; when the server ends, fail what is left."""
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                reply = json.loads(line)
                _, future = self._pending.pop(int(reply.pop("id")))
            except (ValueError, KeyError, TypeError):
                continue
            future.set_result(reply)
        with self._lock:  # the calls this server still owed
            owed = [i for i, (server, _) in self._pending.items() if server is proc]
            pending = [self._pending.pop(i)[1] for i in owed]
            if self._proc is proc:
                self._proc = None
        for future in pending:
            if not future.done():
                future.set_exception(JudgeServerError("the judge server died during a call"))

    def close(self) -> None:
        """Stop the server (idempotent; a later call starts a new one)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()


def verdict(reply: dict[str, Any], ref: ScorerRef) -> float:
    """The number in a server reply, or the exception its failure is (see `JudgeServer.score`)."""
    value = _value(reply, ref)
    if not _finite(value):
        raise JudgeError(f"the judge {ref.factory} gave no finite number: {str(value)[:100]!r}")
    return float(value)


def metrics_verdict(reply: dict[str, Any], ref: ScorerRef) -> dict[str, float]:
    """The named numbers in a server reply, or the exception its failure is."""
    value = _value(reply, ref)
    if not isinstance(value, dict) or not all(_finite(v) for v in value.values()):
        raise JudgeError(f"the judge {ref.factory} gave no finite numbers: {str(value)[:100]!r}")
    return {str(k): float(v) for k, v in value.items()}


def _value(reply: dict[str, Any], ref: ScorerRef) -> Any:
    if "infra" in reply:
        raise JudgeServerError(f"judge sandbox: {reply['infra']}")
    if reply.get("timed_out"):
        raise JudgeTimeout(f"the judge {ref.factory} {reply.get('error', 'timed out')}")
    if not reply.get("ok"):
        raise JudgeError(f"the judge {ref.factory} failed on the answer: {reply.get('error')}")
    return reply.get("value")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_SERVER: JudgeServer | None = None
_SERVER_LOCK = threading.Lock()


def judge_server() -> JudgeServer:
    """This process's judge server (one per env worker), started on its first call."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = JudgeServer()
        return _SERVER


class SandboxedScorer:
    """A module-level scorer function that runs in the judge server's sandbox when called:
    ``await scorer(answer, entry)`` is its verdict (see `sandboxed_scorer`)."""

    def __init__(self, fn: Scorer, limits: Limits = JUDGE_LIMITS) -> None:
        functools.update_wrapper(self, fn)
        self.limits = limits
        self.ref = ScorerRef(f"{__name__}:plain_scorer", (f"{fn.__module__}:{fn.__qualname__}",))

    async def __call__(self, answer: str, entry: Any) -> float:
        return await judge_server().score(self.ref, answer, entry, self.limits)


def sandboxed_scorer(fn: Scorer | None = None, *, limits: Limits = JUDGE_LIMITS) -> Any:
    """Decorate a module-level ``score(answer, entry) -> float`` so each call runs sandboxed
    and is awaited for its verdict (``@sandboxed_scorer`` or
    ``@sandboxed_scorer(limits=Limits(wall_s=5))``)."""
    if fn is None:
        return functools.partial(sandboxed_scorer, limits=limits)
    return SandboxedScorer(fn, limits)


def plain_scorer(path: str) -> Scorer:
    """The undecorated function behind a `sandboxed_scorer` at ``module:qualname``."""
    target = _load(path)
    return getattr(target, "__wrapped__", target)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


# ---------------------------------------------------------------------- the server process
_NUMBER, _DICT, _LIST, _STR = (int, float), dict, list, str  # taken now: the answer may
_SCALAR = (int, float, str, bool, type(None))  # rebind the builtins


def _score(scorer: Scorer, answer: str, entry: Any) -> Any:
    """In the sandboxed child: `eval` guarded (`forge_agent.rewards.eval_guard`), then the
    scorer's verdict, or its value where that is plain JSON data (`JudgeServer.value`)."""
    eval_guard.install()
    value = scorer(answer, entry)
    if type(value) is _DICT and all(type(v) in _NUMBER for v in value.values()):
        return {str(k): v for k, v in value.items()}
    return value if _plain(value) else repr(value)[:100]


def _plain(value: Any) -> bool:
    """Whether `value` is JSON data of the built-in types only (no subclass the answer made:
    its `__str__` would run in the reply's encoder), at most `_VALUE_NODES` parts."""
    todo, seen = [value], 0
    while todo:
        item = todo.pop()
        seen += 1
        if seen > _VALUE_NODES:
            return False
        if type(item) is _LIST:
            todo.extend(item)
        elif type(item) is _DICT:
            if not all(type(k) is _STR for k in item):
                return False
            todo.extend(item.values())
        elif type(item) not in _SCALAR:
            return False
    return True


def _reply(call_id: int, reply: dict[str, Any]) -> bytes:
    """One reply line: the call's id and the fields the client reads, at most `_REPLY_MAX`
    characters."""
    kept = {k: v for k, v in reply.items() if k in ("ok", "value", "error", "timed_out", "infra")}
    line = json.dumps({**kept, "id": call_id})
    if len(line) > _REPLY_MAX:  # the server alone writes its stdout, each line whole
        error = str(kept.get("error", "the verdict is too long"))[:500]
        line = json.dumps({"ok": False, "error": error, "id": call_id})
    return line.encode() + b"\n"


def _send(fd: int, data: bytes) -> None:
    """Write `data` whole (a line longer than the pipe's buffer takes several writes)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _frames(fd: int) -> Any:
    """Requests read from `fd` as they arrive (length-prefixed pickles from the env worker)."""
    buffer = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= 4:
            (size,) = struct.unpack("<I", buffer[:4])
            if len(buffer) < 4 + size:
                break
            yield pickle.loads(buffer[4 : 4 + size])
            buffer = buffer[4 + size :]
        yield None  # nothing complete yet: let the caller reap its children


def serve() -> None:
    """Answer requests on stdin, each call in its own forked sandbox, side by side; replies
    (JSON lines) on stdout as each call ends. Ends when stdin does (the env worker ended; not
    PR_SET_PDEATHSIG, which fires when the *thread* that started the server ends)."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # what importing scorers prints goes to stderr, not into the replies
    scorers: dict[bytes, Scorer] = {}
    running: dict[ForkedCall, int] = {}  # call -> request id
    frames = _frames(0)
    os.write(out_fd, b'{"ready": true}\n')
    while True:
        wait = min((c.deadline for c in running), default=time.monotonic() + 1.0)
        ready, _, _ = select.select([0, *running], [], [], max(0.0, wait - time.monotonic()))
        now = time.monotonic()
        for call in [c for c in running if c in ready or c.deadline <= now]:
            if call in ready and not call.read() and call.deadline > now:
                continue
            call_id = running.pop(call)
            try:
                reply = call.result()
            except SandboxError as exc:
                reply = {"infra": str(exc)}
            _send(out_fd, _reply(call_id, reply))
        if 0 not in ready:
            continue
        for request in frames:
            if request is None:
                break
            try:
                scorer = _scorer(request["ref"], scorers)
            except Exception as exc:
                infra = {"infra": f"cannot build the scorer: {type(exc).__name__}: {exc}"}
                _send(out_fd, _reply(request["id"], infra))
                continue
            if request.get("build_only"):
                _send(out_fd, _reply(request["id"], {"ok": True, "value": 0}))
                continue
            task = functools.partial(_score, scorer, request["answer"], request["entry"])
            running[ForkedCall(task, Limits(**request["limits"]))] = request["id"]
        else:
            return  # the env worker closed our stdin


def _scorer(ref: tuple[str, tuple[Any, ...]], scorers: dict[bytes, Scorer]) -> Scorer:
    """The scorer of `ref`, built once, here, from trusted arguments only."""
    key = pickle.dumps(ref)
    if key not in scorers:
        factory, args = ref
        scorers[key] = _load(factory)(*args)
    return scorers[key]


if __name__ == "__main__":
    serve()

"""A verifiers environment's tool calls under forge-agent's rules (`VerifiersEnv` uses it).

verifiers runs a tool call as ``tool_map[name](**arguments)`` in its own process. Here:

1. **Arguments checked** against the schema the policy was shown (`tool_defs`): an unknown
   tool, a missing, unexpected or mistyped argument is an error observation naming the tool
   and the argument (``bad arguments for 'lookup': argument 'word' must be a string, got
   integer 5. Expected: lookup(word: string)``), not an exception inside the tool.
2. **Run sandboxed:** a verifiers tool is a Python callable of the project's interpreter,
   which bubblewrap cannot start (see `forge_agent.sandbox.forked`). A tool server process
   (``python -m forge_agent.env.adapters.verifiers_tools``) loads the environment once, and runs
   each call in a forked sandbox: no network, the sandbox user, private ``/tmp``, rlimits, killed
   at `Limits.wall_s` (`VerifiersEnv.tool_timeout_s`, below the step timeout). A call that
   times out, runs out of memory or raises is an error observation. Environments that
   override verifiers' `call_tool` (a `StatefulToolEnv`, whose tools take the episode's state
   objects) get the check and the timeout, and run in the env worker: they cannot cross a
   process boundary.
3. **Failed calls pay nothing:** every call that failed (arguments that do not parse or fit
   the schema, an unknown tool, a raise, a timeout) is recorded by id, and `capped_metrics`
   scores the rollout a second time without them; a reward component is the lower of the two
   scores, so a rubric that pays for calls (any calls) cannot be paid by failed ones.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import json
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from forge_agent.errors import InfraError
from forge_agent.rewards.verifiers_rubric import signal_handlers_kept
from forge_agent.sandbox.base import Limits, SandboxError
from forge_agent.sandbox.forked import run_forked
from forge_agent.toolkit.schema import loads_strict, signature_text, validate_arguments

if TYPE_CHECKING:
    import verifiers as vf

__all__ = ["TOOL_LIMITS", "ToolCallFailed", "ToolGuard"]

TOOL_LIMITS = Limits(wall_s=15.0, cpu_s=15.0, memory_mb=1024, max_procs=32, file_size_mb=64)
"""Limits of one sandboxed call (its wall time is `VerifiersEnv.tool_timeout_s`)."""
START_TIMEOUT_S = 120.0  # loading an environment imports verifiers and builds its datasets
_SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")


class ToolCallFailed(Exception):
    """A tool call that failed; verifiers' `env_response` turns it into the tool message."""


class ToolServerError(InfraError):
    """The tool server did not start or died between calls (infra: not the policy's doing)."""


class ToolGuard:
    """The checked, sandboxed `call_tool` of one verifiers environment (see the module doc).

    Args:
        vf_env: the loaded verifiers environment (its `tool_defs`, `tool_map`, `call_tool`).
        module, env_args: what `verifiers.load_environment` loaded it from (the server loads
            the same).
        timeout_s: wall-clock bound of one call.
    """

    def __init__(
        self, vf_env: vf.Environment, module: str, env_args: dict[str, Any], timeout_s: float
    ):
        from verifiers.legacy.envs.tool_env import ToolEnv

        self.module, self.env_args, self.timeout_s = module, env_args, timeout_s
        self.specs = {t.name: dict(t.parameters or {}) for t in vf_env.tool_defs or []}
        self.skipped = dict(getattr(vf_env, "skipped_args", None) or {})
        self.sandboxed = type(vf_env).call_tool is ToolEnv.call_tool
        self.failed: set[str] = set()
        self.infra: ToolServerError | None = None  # raised by `VerifiersEnv.step`, not shown
        self._original = vf_env.call_tool
        self._server: subprocess.Popen[bytes] | None = None
        self._key = ""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the verifiers hook
    async def call_tool(
        self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any
    ) -> Any:
        """verifiers' `call_tool`, checked and sandboxed; raises `ToolCallFailed` (which its
        `env_response` shows the policy as the call's tool message) on any failure."""
        from verifiers.legacy.types import ToolMessage

        try:
            self.check(tool_name, tool_args)
            if not self.sandboxed:
                call = self._original(tool_name, tool_args, tool_call_id, **kwargs)
                return await asyncio.wait_for(call, self.timeout_s)
            reply = await asyncio.to_thread(self.run, tool_name, tool_args)
        except TimeoutError:
            self.failed.add(tool_call_id)
            raise ToolCallFailed(
                f"Error: tool {tool_name!r} timed out after {self.timeout_s:g} s"
            ) from None
        except ToolServerError as exc:  # verifiers would show it as the call's message
            self.infra = exc
            raise ToolCallFailed(f"Error: {exc}") from None
        except Exception as exc:
            self.failed.add(tool_call_id)
            if isinstance(exc, ToolCallFailed):
                raise
            raise ToolCallFailed(
                f"Error: tool {tool_name!r} raised {type(exc).__name__}: {exc}"
            ) from None
        if not reply.get("ok"):
            self.failed.add(tool_call_id)
            raise ToolCallFailed(f"Error: tool {tool_name!r} failed: {reply.get('error')}")
        return ToolMessage(role="tool", content=reply["value"], tool_call_id=tool_call_id)

    def check(self, name: str, args: object) -> None:
        """Raise `ToolCallFailed` naming the tool and argument when the call does not fit."""
        if name not in self.specs:
            known = ", ".join(self.specs) or "none"
            raise ToolCallFailed(f"Error: unknown tool {name!r}; available: {known}")
        if isinstance(args, dict):  # a StatefulToolEnv adds its state arguments itself
            args = {k: v for k, v in args.items() if k not in self.skipped.get(name, ())}
        problems = validate_arguments(args, self.specs[name])
        if problems:
            shown = {"function": {"parameters": self.specs[name]}}
            raise ToolCallFailed(
                f"Error: bad arguments for {name!r}: {'; '.join(problems[:5])}. "
                f"Expected: {name}({signature_text(shown)})"  # type: ignore[arg-type]
            )

    def note_unparsed(self, assistant_message: dict[str, Any]) -> None:
        """Record the calls whose arguments verifiers cannot parse (it answers them itself)."""
        for call in assistant_message.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                try:
                    loads_strict(arguments or "{}")
                except ValueError:
                    self.failed.add(str(call.get("id")))

    # ------------------------------------------------------------------ the tool server
    def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """One call in the tool server's forked sandbox (blocking; one call at a time)."""
        request = {"tool": name, "args": args, "limits": self._limits().to_dict()}
        with self._lock:
            server = self._started()
            assert server.stdin is not None and server.stdout is not None
            try:
                server.stdin.write(json.dumps(request).encode() + b"\n")
                server.stdin.flush()
                line = server.stdout.readline()
            except OSError:
                line = b""
            if not line:
                self._stop()
                raise ToolServerError(
                    f"the tool server of verifiers:{self.module} died during a call of {name!r}"
                )
            reply = json.loads(line)
        if "infra" in reply:
            raise ToolServerError(f"verifiers:{self.module} tool sandbox: {reply['infra']}")
        return reply

    def _limits(self) -> Limits:
        return TOOL_LIMITS.with_(wall_s=self.timeout_s, cpu_s=self.timeout_s + 1)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._server is not None and self._server.poll() is None:
            return self._server
        env = {k: v for k, v in os.environ.items() if not any(m in k for m in _SECRET_MARKERS)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        argv = [sys.executable, "-m", "forge_agent.env.adapters.verifiers_tools", self.module]
        argv.append(json.dumps(self.env_args))
        self._key = _server_key(argv, env)
        self._server = _IDLE.take(self._key)  # a closed env's server: loaded, no call running
        if self._server is not None:
            return self._server
        self._server = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        ready = _readline(self._server, START_TIMEOUT_S)
        if not ready.startswith(b'{"ready"'):
            self._stop()
            raise ToolServerError(
                f"the tool server of verifiers:{self.module} did not start: "
                f"{ready.decode(errors='replace')[:300] or 'no answer'}"
            )
        return self._server

    def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.kill()
            server.wait()

    def close(self) -> None:
        """Give the tool server to the next env of this process that loads the same
        environment (`_IdleServers`), or stop it (idempotent)."""
        with self._lock:
            server, self._server = self._server, None
            if server is not None and not _IDLE.give(self._key, server):
                server.kill()
                server.wait()


_VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)
"""Variables that change while a process runs and that no tool reads (pytest's per-test
marker): left out of `_server_key`."""


def _server_key(argv: list[str], env: dict[str, str]) -> str:
    """What makes two tool servers interchangeable: the command and its environment."""
    return json.dumps([argv, sorted((k, v) for k, v in env.items() if k not in _VOLATILE_ENV)])


class _IdleServers:
    """Tool servers of closed envs, kept for the next env of this process that loads the same
    environment: a server starts by importing verifiers and loading the environment (~9 s on
    a loaded 2-core machine), and each episode makes a new env. A server holds nothing of a
    call (each runs in its own forked sandbox), so a reused one is as fresh as a new one.
    Idle servers exit with this process (stdin's EOF ends `serve`; killed at exit here)."""

    MAX_PER_KEY = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[subprocess.Popen[bytes]]] = {}
        atexit.register(self.stop_all)

    def take(self, key: str) -> subprocess.Popen[bytes] | None:
        with self._lock:
            servers = self._idle.get(key, [])
            while servers:
                server = servers.pop()
                if server.poll() is None:
                    return server
                server.wait()
        return None

    def give(self, key: str, server: subprocess.Popen[bytes]) -> bool:
        """Keep `server` (alive, no call running) for `take`; False when not kept."""
        if not key or server.poll() is not None:
            return False
        with self._lock:
            servers = self._idle.setdefault(key, [])
            if len(servers) >= self.MAX_PER_KEY:
                return False
            servers.append(server)
        return True

    def stop_all(self) -> None:
        with self._lock:
            servers = [s for kept in self._idle.values() for s in kept]
            self._idle.clear()
        for server in servers:
            server.kill()
            server.wait()


_IDLE = _IdleServers()


def _readline(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    assert proc.stdout is not None
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return result[0] if result else b""


# ---------------------------------------------------------------------- the server process
def _content(value: Any) -> Any:
    from verifiers.legacy.utils.tool_utils import is_valid_tool_content_parts

    return value if is_valid_tool_content_parts(value) else str(value)


def _call(fn: Any, args: dict[str, Any]) -> Any:
    result = fn(**args)
    if inspect.isawaitable(result):
        result = asyncio.run(result)  # type: ignore[arg-type]
    return _content(result)


def serve(module: str, env_args: dict[str, Any]) -> None:
    """Load the environment, then answer JSON-line calls on stdin, each in a forked sandbox."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what loading prints goes to stderr, not into the replies
    import verifiers

    with signal_handlers_kept():
        tools = verifiers.load_environment(module, **env_args).tool_map
    out.write(json.dumps({"ready": sorted(tools)}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        call = functools.partial(_call, tools[request["tool"]], request["args"])
        try:
            reply = run_forked(call, Limits(**request["limits"]))
        except SandboxError as exc:
            reply = {"infra": str(exc)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.argv[1], json.loads(sys.argv[2]))

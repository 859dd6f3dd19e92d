"""Docker backend (through the ``docker`` SDK), for hosts that have an engine.

Every container runs with ``network_mode="none"``, ``mem_limit`` (no swap), ``pids_limit``,
``cap_drop=["ALL"]``, ``no-new-privileges``, the project's seccomp profile
(`forge_agent.sandbox.seccomp`: no ptrace, process_vm_*, namespaces, AF_VSOCK, ...), a
read-only root, a tmpfs ``/tmp`` and uid/gid 65534. PID 1 is our own undumpable process (the
one-shot supervisor, or a session's keep-alive, which reaps orphans), not Docker's
``--init``: a dumpable init of the code's uid could be rewritten through ``/proc/1/mem``.
The workspace is a host directory bind-mounted at ``/workspace`` (its own size- and
inode-limited tmpfs when the host is root, see `forge_agent.sandbox.workspace`); the supervisor
(`forge_agent.sandbox.supervisor`, started as ``python3 -I``) and each request are in a
read-only ``/.forge``; replies go to ``/.forge-out``.

- One-shot `DockerSandbox.run`: ``docker run`` of the supervisor, which runs the request.
- `DockerSession`: one long-lived container (an undumpable keep-alive process); each run is a
  ``docker exec`` of the supervisor (the warm path). After each run the supervisor kills every
  process the run left, sparing only the container's init and keep-alive.

Replies never come from container logs (`forge_agent.sandbox.docker_channel`): the host
creates a reply file with a random name in the reply folder and keeps a descriptor to it; the
supervisor opens it and unlinks it before the code starts (so the code cannot reach it), and
the host reads the reply through its descriptor. Every reply and the keep-alive's ready line
carry a hardening report (seccomp mode, no_new_privs, dumpable); a container where a step did
not take effect is refused with a `SandboxError`.

The supervisor enforces the wall time, and so does the host, whatever state the supervisor is in
(code of its uid can SIGSTOP it): the supervisor unlinks the reply file just before the code
starts, the host sees that through its descriptor (`docker_channel.Reply.taken`) and kills the
container when no answer came within ``wall_s`` + ``WALL_GRACE_S`` of it (or
``BACKSTOP_GRACE_S`` after the start when the code never started). The session then starts a
new container on the next run, same workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from forge_agent.sandbox import janitor
from forge_agent.sandbox.admission import Reservation, reserve_for
from forge_agent.sandbox.base import (
    WORKSPACE,
    FileData,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    WorkspaceSession,
    check_request,
    host_write_file,
    output_memory_mb,
    reply_max_bytes,
)
from forge_agent.sandbox.docker_channel import (
    BACKSTOP_GRACE_S,
    CONTROL_DIR,
    REPLY_DIR,
    ControlDirs,
    no_answer,
    result_of_reply,
    wait_within_wall,
)
from forge_agent.sandbox.docker_local import DEFAULT_IMAGE
from forge_agent.sandbox.seccomp import docker_profile
from forge_agent.sandbox.supervisor_host import hardening_problem

if TYPE_CHECKING:
    from docker.models.containers import Container

__all__ = ["DockerSandbox", "DockerSession"]

SANDBOX_USER = "65534:65534"
START_TIMEOUT_S = 30.0
SUPERVISOR_MEMORY_MB = 48
"""Memory of the container beyond `Limits.memory_mb` for the supervisor (plus its output's
`output_memory_mb`)."""


class DockerSandbox(Sandbox):
    """Sandboxes made of Docker containers.

    Args:
        limits: default limits for runs that pass none.
        image: an image holding ``python`` (build one offline with
            `forge_agent.sandbox.docker_local.build_python_image`).
        base_url: the engine's address (default: the environment's, e.g. ``DOCKER_HOST``).
        python: the interpreter inside the image.
        workspace_root: host directory under which per-session workspaces are created.
        ro_binds: host paths bound read-only at the same place in every container (e.g. the
            folder of tool servers that `DockerSession.spawn` starts).
        memory_budget_mb: the host-wide sandbox memory budget (see
            `forge_agent.sandbox.admission`).
        admission_timeout_s: how long a new sandbox waits for room in the budget.
    """

    name = "docker"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        image: str = DEFAULT_IMAGE,
        base_url: str | None = None,
        python: str = "/usr/bin/python3",
        workspace_root: str | None = None,
        ro_binds: Sequence[str] = (),
        memory_budget_mb: int | None = None,
        admission_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(limits)
        self.memory_budget_mb = memory_budget_mb
        self.admission_timeout_s = admission_timeout_s
        try:
            import docker
        except ImportError as exc:
            raise SandboxError("the 'docker' Python package is not installed") from exc
        self._docker = docker
        try:
            if base_url is None:
                self.client = docker.from_env()
            else:
                self.client = docker.DockerClient(base_url=base_url)
            self.client.ping()
        except Exception as exc:
            raise SandboxError(
                f"no Docker engine reachable at {base_url or 'the default address'}: {exc}"
            ) from exc
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"Docker image {image!r} not found; build it offline with "
                "forge_agent.sandbox.docker_local.build_python_image(client)"
            ) from None
        self.image = image
        self.base_url = base_url
        self.ro_binds = tuple(ro_binds)
        self.python = python
        self.workspace_root = workspace_root
        self.owner = (65534, 65534) if os.geteuid() == 0 else None

    def session(self, limits: Limits | None = None) -> DockerSession:
        """Start a long-lived container with a fresh workspace."""
        return DockerSession(self, limits or self.limits)

    def run(
        self,
        code: str | None = None,
        argv: list[str] | None = None,
        files: Mapping[str, FileData] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """One ``docker run`` of the supervisor in a fresh container, removed afterwards."""
        check_request(code, argv)
        limits = limits or self.limits
        reservation = self.reserve(limits)
        container = None
        start = time.monotonic()
        try:
            dirs = ControlDirs(self.workspace_root, self.owner, limits)
        except BaseException:
            reservation.release()
            raise
        try:
            for path, data in (files or {}).items():
                host_write_file(dirs.workspace, path, data, owner=self.owner)
            request_path = dirs.write_request(code, argv, limits, protect_pids=[])
            reply = dirs.new_reply()
            try:
                container = self.client.containers.run(
                    self.image,
                    self.supervisor_command("oneshot", request_path, reply.container_path),
                    detach=True,
                    **container_options(dirs, limits, self.ro_binds),
                )
            except self._docker.errors.DockerException as exc:
                raise SandboxError(f"docker run failed: {exc}") from exc
            janitor.watch("container", container.id, self.base_url or "")
            backstop = limits.wall_s + BACKSTOP_GRACE_S

            def wait_for_exit() -> None:
                with contextlib.suppress(Exception):
                    container.wait(timeout=backstop + START_TIMEOUT_S)

            late = wait_within_wall(wait_for_exit, reply, limits, start)
            if late is not None:
                _kill_quietly(container)
                reply.close()
                return no_answer(start, late)
            return result_of_reply(reply.read(reply_max_bytes(limits)), start, "container")
        finally:
            if container is not None:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                janitor.forget("container", container.id)
            dirs.remove()
            reservation.release()

    def reserve(self, limits: Limits) -> Reservation:
        """Reserve this sandbox's share of the host-wide memory budget (waits, or refuses)."""
        return reserve_for(limits, self.memory_budget_mb, self.admission_timeout_s)

    def supervisor_command(self, *args: str) -> list[str]:
        """The command line running the supervisor (isolated mode) with `args`."""
        return [self.python, "-I", f"{CONTROL_DIR}/supervisor.py", *args]


class DockerSession(WorkspaceSession):
    """One container kept running for an episode; runs are ``docker exec`` of the supervisor."""

    def __init__(self, backend: DockerSandbox, limits: Limits) -> None:
        super().__init__(backend, limits)
        self.backend: DockerSandbox = backend
        self._container: Any = None
        self._keepalive_pid: int | None = None
        self._spawned: list[ContainerProcess] = []
        self._open(backend.reserve(limits), self._make_workspace)

    def _make_workspace(self) -> str:
        self._dirs = ControlDirs(self.backend.workspace_root, self.backend.owner, self.limits)
        return self._dirs.workspace

    def _start(self) -> None:
        backend = self.backend
        try:
            self._container = backend.client.containers.run(
                backend.image,
                backend.supervisor_command("keepalive"),
                detach=True,
                **container_options(self._dirs, self.limits, backend.ro_binds),
            )
        except backend._docker.errors.DockerException as exc:
            raise SandboxError(f"cannot start a Docker sandbox container: {exc}") from exc
        janitor.watch("container", self._container.id, backend.base_url or "")
        # The keep-alive prints one ready line (its pid and hardening) before any code runs.
        deadline = time.monotonic() + START_TIMEOUT_S
        ready = None
        while ready is None and time.monotonic() < deadline:
            try:
                logs = self._container.logs(stdout=True, stderr=True)
            except Exception as exc:
                raise SandboxError(f"cannot read the Docker sandbox's start: {exc}") from exc
            for line in logs.splitlines():
                with contextlib.suppress(ValueError):
                    found = json.loads(line)
                    if isinstance(found, dict) and found.get("ready"):
                        ready = found
            if ready is None:
                time.sleep(0.02)
        if ready is None or not isinstance(ready.get("pid"), int):
            self._remove_container()
            raise SandboxError(f"the Docker sandbox's keep-alive did not start: {logs[-500:]!r}")
        problem = hardening_problem(ready.get("hardening"))
        if problem is not None:
            self._remove_container()
            raise SandboxError(f"Docker sandbox is not hardened: {problem}")
        self._keepalive_pid = ready["pid"]

    @property
    def alive(self) -> bool:
        """True while the session's container is running."""
        if self._container is None:
            return False
        try:
            self._container.reload()
        except Exception:
            return False
        return self._container.status == "running"

    @property
    def _file_owner(self) -> tuple[int, int] | None:
        return self.backend.owner

    def _execute(
        self, code: str | None, argv: list[str] | None, limits: Limits, start: float
    ) -> RunResult:
        """``docker exec`` the supervisor to run `code` or `argv` in the session's container."""
        if self._container is None or not self.alive:
            self._remove_container()
            self.restarts += 1
            self._start()
        request_path = self._dirs.write_request(
            code, argv, limits, protect_pids=[self._keepalive_pid]
        )
        reply = self._dirs.new_reply()
        cmd = self.backend.supervisor_command("oneshot", request_path, reply.container_path)
        api = self.backend.client.api
        try:
            exec_id = api.exec_create(
                self._container.id, cmd, user=SANDBOX_USER, workdir=WORKSPACE
            )["Id"]
        except Exception as exc:
            reply.close()
            raise SandboxError(f"docker exec failed: {exc}") from exc

        def wait_for_exit() -> None:
            with contextlib.suppress(Exception):
                for _ in api.exec_start(exec_id, stream=True, demux=True):
                    pass  # the supervisor prints nothing; the stream ends when it exits

        late = wait_within_wall(wait_for_exit, reply, limits, start)
        if late is not None:
            reply.close()
            self._remove_container()
            return no_answer(start, late)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self._dirs.control, os.path.basename(request_path)))
        result = result_of_reply(reply.read(reply_max_bytes(limits)), start, "supervisor")
        if result.stderr.startswith("[sandbox]"):
            # The supervisor died, so nothing bounds what the run left behind: drop the
            # container (the next run starts a new one on the same workspace).
            self._remove_container()
        return result

    def _remove_container(self) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            janitor.forget("container", self._container.id)
        self._container = None

    def close(self) -> None:
        """Remove the container and delete the workspace. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for proc in self._spawned:
                proc.kill()
            self._spawned.clear()
            self._remove_container()
            if hasattr(self, "_dirs"):
                self._dirs.remove()
            self._reservation.release()

    def spawn(
        self,
        argv: list[str],
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived process in a sibling container of the session's: the same image,
        hardening, workspace volume and read-only binds (not the reply folder: it lives on
        while the host clears that folder before each run), no network (unless the session has
        it), the rlimits of `limits` and memory/pids limits of its own. Its stdio is attached
        through the ``docker`` CLI (``docker start -ai``); `kill()` removes the container. It is
        removed when the session closes. The session's runs cannot reach it."""
        check_request(None, argv)
        limits = limits or self.limits
        if limits.network != self.limits.network:
            raise ValueError(
                f"limits.network={limits.network} differs from the session's "
                f"network={self.limits.network}"
            )
        backend = self.backend
        cli = shutil.which("docker")
        if cli is None:
            raise SandboxError("spawn needs the docker CLI on PATH (it attaches the pipes)")
        options = container_options(self._dirs, limits, backend.ro_binds, replies=False)
        options["environment"] = {**options["environment"], **(env or {})}
        command = [
            backend.python, "-I", f"{CONTROL_DIR}/supervisor.py", "exec",
            json.dumps(limits.to_dict()), *argv,
        ]  # fmt: skip
        with self._lock:
            self._check_open()
            try:
                container = backend.client.containers.create(
                    backend.image, command, stdin_open=True, **options
                )
            except backend._docker.errors.DockerException as exc:
                raise SandboxError(f"cannot create a Docker container to spawn: {exc}") from exc
            janitor.watch("container", container.id, backend.base_url or "")
            host = ["-H", backend.base_url] if backend.base_url else []
            try:
                proc = ContainerProcess(
                    container,
                    [cli, *host, "start", "--attach", "--interactive", container.id],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            except OSError as exc:
                _remove_quietly(container)
                raise SandboxError(f"cannot run the docker CLI ({cli!r}): {exc}") from exc
            self._spawned.append(proc)
            return proc


def container_options(
    dirs: ControlDirs, limits: Limits, ro_binds: Sequence[str] = (), *, replies: bool = True
) -> dict[str, Any]:
    """The hardening and limits every sandbox container gets; `replies` binds the host-side
    reply folder (only containers whose supervisor answers through it need it: a spawned
    process, which lives on while the host clears that folder, never gets it)."""
    memory = f"{int(limits.memory_mb) + SUPERVISOR_MEMORY_MB + output_memory_mb(limits)}m"
    return {
        "user": SANDBOX_USER,
        "working_dir": WORKSPACE,
        "network_mode": "bridge" if limits.network else "none",
        "mem_limit": memory,
        "memswap_limit": memory,
        "pids_limit": int(limits.max_procs) + 8,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", f"seccomp={docker_profile()}"],
        "read_only": True,
        "tmpfs": {"/tmp": f"size={int(limits.file_size_mb)}m,mode=1777"},
        "volumes": {
            dirs.workspace: {"bind": WORKSPACE, "mode": "rw"},
            dirs.control: {"bind": CONTROL_DIR, "mode": "ro"},
            **{path: {"bind": path, "mode": "ro"} for path in ro_binds},
            **({dirs.replies: {"bind": REPLY_DIR, "mode": "rw"}} if replies else {}),
        },
        "environment": {"HOME": WORKSPACE, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"},
        "log_config": {"type": "json-file", "config": {"max-size": "1m", "max-file": "1"}},
        "labels": {"forge-agent.sandbox": "1"},
    }


class ContainerProcess(subprocess.Popen):  # type: ignore[type-arg]
    """The ``docker start -ai`` client of a spawned container; `kill()` also removes the
    container (killing the client alone would leave it running)."""

    def __init__(self, container: Container, args: list[str], **kwargs: Any) -> None:
        self.container = container
        super().__init__(args, **kwargs)

    def kill(self) -> None:
        _remove_quietly(self.container)
        with contextlib.suppress(OSError):
            super().kill()


def _remove_quietly(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.remove(force=True)
    janitor.forget("container", container.id)


def _kill_quietly(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.kill()

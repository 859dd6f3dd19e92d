"""A private Docker engine and a locally built Python image, for tests and benchmarks.

Nothing is pulled from a registry: `build_python_image` packs the host's system Python, its
libraries and a few shell tools into a tarball and ``docker import``s it (about 70 MB).
`LocalDockerd` starts ``dockerd`` as root on a private socket in a temporary directory
(``--iptables=false --bridge=none``: containers get no network at all) and stops it afterwards.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

__all__ = ["DEFAULT_IMAGE", "LocalDockerd", "build_python_image", "python_rootfs_paths"]

DEFAULT_IMAGE = "forge-agent-sandbox-python:local"

TOOLS = (
    "sh", "dash", "bash", "cat", "ls", "echo", "sleep", "id", "env", "true", "false", "mkdir",
    "rm", "cp", "mv", "head", "tail", "wc", "grep", "sed", "touch", "kill", "ps", "timeout",
    "dd", "yes", "setsid", "nohup", "sort", "uniq", "find", "xargs", "pwd", "printf", "test",
)  # fmt: skip


def python_rootfs_paths(python: str = "/usr/bin/python3") -> list[str]:
    """Host files a minimal root file system needs: python, its stdlib, tools and their libs."""
    real_python = os.path.realpath(python)
    version = Path(real_python).name  # python3.11
    paths = {python, real_python, "/etc/passwd", "/etc/group", "/etc/ld.so.cache"}
    binaries = [real_python]
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            paths.add(found)
            binaries.append(os.path.realpath(found))
            paths.add(os.path.realpath(found))
    stdlib = Path(f"/usr/lib/{version}")
    for path in stdlib.rglob("*"):
        rel = path.relative_to(stdlib).parts
        if rel and rel[0] in ("test", "idlelib", "tkinter", "turtledemo", "ensurepip"):
            continue
        if path.is_file() or path.is_symlink():
            paths.add(str(path))
            if path.suffix == ".so" and "lib-dynload" in rel:
                binaries.append(str(path))  # their libraries too: _ctypes needs libffi
    for binary in binaries:
        # a clean environment: an LD_PRELOAD this process carries (vLLM's CPU platform sets
        # one to libraries under site-packages) would put host files into the image
        out = subprocess.run(
            ["ldd", binary], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
        ).stdout
        for line in out.splitlines():
            for token in line.split():
                if token.startswith("/"):
                    paths.add(token)
                    paths.add(os.path.realpath(token))
    # /lib, /bin ... may be symlinks into /usr: store every file under its real directory.
    return sorted(
        {os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)) for p in paths}
    )


def build_python_image(
    client: object, tag: str = DEFAULT_IMAGE, python: str = "/usr/bin/python3"
) -> str:
    """Import a minimal image holding the system Python into the engine behind `client`.

    `client` is a ``docker.DockerClient``. Returns the tag. Nothing is pulled.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for top in ("bin", "sbin", "lib", "lib64"):
            host = Path("/") / top
            if host.is_symlink():
                info = tarfile.TarInfo(top)
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(host)
                tar.addfile(info)
        for directory in ("tmp", "workspace", "proc", "sys", "dev", "etc", ".forge"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for path in python_rootfs_paths(python):
            if os.path.exists(path) or os.path.islink(path):
                tar.add(path, arcname=path.lstrip("/"), recursive=False)
    buffer.seek(0)
    api = client.api  # type: ignore[attr-defined]
    api.import_image_from_data(
        buffer.getvalue(),
        repository=tag.split(":")[0],
        tag=tag.split(":")[1] if ":" in tag else "latest",
    )
    return tag


class LocalDockerd:
    """A ``dockerd`` on a private socket, started and stopped by this process (needs root).

    Usage::

        with LocalDockerd() as engine:
            sandbox = DockerSandbox(base_url=engine.base_url)
    """

    def __init__(self, root: str | None = None, start_timeout_s: float = 60.0) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="forge-dockerd-"))
        self.socket = self.root / "docker.sock"
        self.base_url = f"unix://{self.socket}"
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "dockerd.log"

    def start(self) -> LocalDockerd:
        """Start dockerd and wait until it answers; raises RuntimeError with the reason."""
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise RuntimeError("dockerd not found (install the Debian package 'docker.io')")
        if os.geteuid() != 0:
            raise RuntimeError("starting a private dockerd needs root")
        log = open(self.log_path, "wb")  # noqa: SIM115 - dockerd writes it until stop()
        self.proc = subprocess.Popen(
            [
                dockerd,
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "dockerd.pid"),
                "-H",
                self.base_url,
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        import docker

        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited with {self.proc.returncode}: {self.log_tail()}")
            if self.socket.exists():
                try:
                    docker.DockerClient(base_url=self.base_url, timeout=5).ping()
                    return self
                except Exception:
                    pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"dockerd did not answer within {self.start_timeout_s} s: {self.log_tail()}"
        )

    def log_tail(self, max_chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-max_chars:].strip()
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop dockerd (its containers die with it) and delete its directories."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True)
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalDockerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The env worker process: builds one env at a time and answers the controller's requests.

Started by `EnvWorker` as `python -m forge_agent.env._worker_main`. Frames on stdin/stdout are a
4-byte big-endian length and a pickle. Requests: ("init", spec, kwargs), ("reset", task, seed),
("step", message), ("close",). Replies: ("ok", value) or ("error", text). The env's own prints go
to stderr so they cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
import traceback
from typing import IO, Any

_HEADER = struct.Struct(">I")


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the controller dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def _write(stream: IO[bytes], obj: Any) -> None:
    try:
        data = pickle.dumps(obj)
    except Exception as exc:
        data = pickle.dumps(("error", f"could not send the result to the controller: {exc!r}"))
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def main() -> None:
    _die_with_parent()
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the env's prints go to stderr
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.buffer
    loop = asyncio.new_event_loop()
    spec, kwargs, env = None, {}, None
    while True:
        request = _read(protocol_in)
        if request is None or request[0] == "exit":
            break
        command, args = request[0], request[1:]
        try:
            if command == "init":
                spec, kwargs = args
                value = None
            elif command == "reset":
                if env is None:
                    env = spec.make(**kwargs)
                value = loop.run_until_complete(env.reset(*args))
            elif command == "step":
                if env is None:
                    raise RuntimeError("step() before reset()")
                value = loop.run_until_complete(env.step(*args))
            elif command == "close":
                if env is not None:
                    env, closing = None, env
                    loop.run_until_complete(closing.close())
                value = None
            else:
                raise ValueError(f"unknown request {command!r}")
        except BaseException as exc:
            text = "".join(traceback.format_exception(exc))
            _write(protocol_out, ("error", f"{type(exc).__name__}: {exc}", text))
            continue
        _write(protocol_out, ("ok", value))
    if env is not None:
        with contextlib.suppress(Exception):  # exiting anyway
            loop.run_until_complete(env.close())


if __name__ == "__main__":
    main()

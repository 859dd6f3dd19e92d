"""Hidden-test grading for code_exec, in a fresh sandbox the episode's code never touched.

Two kinds of tests:

- `tests` (``[{"args": [...], "expected": value}]``): only the solution's source and the test
  *inputs* enter the sandbox; the expected values stay in this process, and return values (not
  stdout) are compared here. So a solution cannot edit the tests, pass by printing the expected
  output, or fake results: faking needs the expected values.
- `test_code` (assertion code: HumanEval's ``check(candidate)``, MBPP's ``assert`` lines): the
  assertions run in a process that never runs solution code (the *checker*); the solution is
  imported in a forked *runner* process, and every call the assertions make to the candidate
  (or to any other function the solution module defines, e.g. HumanEval's ``poly``) crosses a
  socket as plain data (None, bool, int, float, str, bytes, list, tuple, dict, set). So a
  return value cannot fake equality (an object whose ``__eq__`` is always true arrives as plain
  data, or not at all), and the solution cannot reach the verdict: the checker is undumpable,
  and the secret that marks its record reaches it on a file read and deleted before the fork
  (the runner's copy is zeroed). The test code (its expected values) is read only after the
  fork, from a descriptor the runner closes before it imports the solution: before, the
  runner held it in memory, and a solution could read its own expected answers.

Every record the run prints is validated: a malformed, duplicated or unexpected record, from
a solution that found the output channel, makes the solution fail (reward 0); it is never an
infrastructure error.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GradeResult", "extract_code", "grade"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)

HARNESS = r"""
import copy, json, os, signal, sys
NONCE = {nonce!r}
ENTRY = {entry!r}
PER_TEST_S = {per_test_s!r}
out = os.fdopen(os.dup(1), "w")
sys.stdout = open(os.devnull, "w")  # the solution's prints go nowhere
with open("inputs.json") as f:
    inputs = json.load(f)
os.remove("inputs.json")

def report(record):
    out.write(NONCE + json.dumps(record) + "\n")
    out.flush()

def on_alarm(signum, frame):
    raise TimeoutError(f"test took longer than {{PER_TEST_S}} s")

signal.signal(signal.SIGALRM, on_alarm)
try:
    signal.alarm(PER_TEST_S)
    import solution
    signal.alarm(0)
    fn = getattr(solution, ENTRY)
except BaseException as exc:
    report({{"load_error": f"{{type(exc).__name__}}: {{exc}}"[:300]}})
    os._exit(0)
for i, args in enumerate(inputs):
    try:
        signal.alarm(PER_TEST_S)
        value = fn(*copy.deepcopy(args))
        signal.alarm(0)
        report({{"i": i, "value": json.loads(json.dumps(value))}})
    except BaseException as exc:
        signal.alarm(0)
        report({{"i": i, "error": f"{{type(exc).__name__}}: {{exc}}"[:300]}})
os._exit(0)
"""


ASSERT_HARNESS_SOURCE = r"""
import builtins, ctypes, json, os, signal, socket, sys

ENTRY = __ENTRY__
PER_TEST_S = __PER_TEST_S__
sys.path[:] = [p for p in sys.path if p != ""]  # the checker imports nothing from the workspace
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # undumpable: the runner cannot read our memory
secret = bytearray(64)
fd = os.open("nonce", os.O_RDONLY)
size = os.readv(fd, [secret])
os.close(fd)
os.remove("nonce")
test_fd = os.open("test_code.py", os.O_RDONLY)  # read after the fork: never in the runner
os.remove("test_code.py")
out = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.dup2(null, 2)


def encode(v, depth=0):
    if depth > 100:
        raise TypeError("value nested too deeply")
    if v is None:
        return ["n"]
    if isinstance(v, bool):
        return ["b", bool(v)]
    if isinstance(v, int):
        return ["i", str(int(v))]
    if isinstance(v, float):
        return ["f", repr(float(v))]
    if isinstance(v, str):
        return ["s", str.__str__(v)]
    if isinstance(v, (bytes, bytearray)):
        return ["y", bytes(v).hex()]
    if isinstance(v, (list, tuple, set, frozenset)):
        tag = {list: "l", tuple: "t", set: "set", frozenset: "fset"}[
            next(t for t in (list, tuple, frozenset, set) if isinstance(v, t))
        ]
        return [tag, [encode(x, depth + 1) for x in v]]
    if isinstance(v, dict):
        return ["d", [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]]
    raise TypeError(f"values of type {type(v).__name__} cannot be checked")


def decode(e):
    tag = e[0]
    if tag == "n":
        return None
    if tag == "b":
        return e[1] is True
    if tag == "i":
        return int(e[1])
    if tag == "f":
        return float(e[1])
    if tag == "s":
        return str(e[1])
    if tag == "y":
        return bytes.fromhex(e[1])
    if tag in ("l", "t", "set", "fset"):
        items = [decode(x) for x in e[1]]
        return {"l": list, "t": tuple, "set": set, "fset": frozenset}[tag](items)
    if tag == "d":
        return {decode(k): decode(x) for k, x in e[1]}
    raise ValueError(f"unknown tag {tag!r}")


def send(sock, obj):
    sock.sendall(json.dumps(obj).encode() + b"\n")


def receive(sock, buffer):
    while b"\n" not in buffer:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise EOFError("the solution's process ended")
        buffer += chunk
        if len(buffer) > 64 << 20:
            raise ValueError("a value of more than 64 MB")
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


def runner(sock):
    # The solution's process: no secret, no tests, no output channel; answers calls until EOF.
    secret[:] = bytes(len(secret))
    os.close(out)
    os.close(test_fd)
    sys.path.insert(0, "")

    def on_alarm(signum, frame):
        raise TimeoutError(f"a call took longer than {PER_TEST_S} s")

    signal.signal(signal.SIGALRM, on_alarm)
    buffer = bytearray()
    try:
        signal.alarm(PER_TEST_S)
        import solution
        signal.alarm(0)
        names = {}
        for name, value in list(vars(solution).items()):
            if name.startswith("__") or type(value).__name__ == "module":
                continue
            if callable(value):
                names[name] = ["call"]
            else:
                try:
                    names[name] = ["value", encode(value)]
                except TypeError:
                    pass
        send(sock, {"names": names})
    except BaseException as exc:
        send(sock, {"load_error": f"{type(exc).__name__}: {exc}"[:300]})
        os._exit(0)
    while True:
        try:
            request = receive(sock, buffer)
        except BaseException:
            os._exit(0)
        try:
            args = [decode(a) for a in request["args"]]
            kwargs = {k: decode(v) for k, v in request["kwargs"].items()}
            signal.alarm(PER_TEST_S)
            value = getattr(solution, request["name"])(*args, **kwargs)
            signal.alarm(0)
            reply = {"value": encode(value)}
        except BaseException as exc:
            signal.alarm(0)
            reply = {"raised": [type(exc).__name__, str(exc)[:300]]}
        try:
            send(sock, reply)
        except BaseException:
            os._exit(0)


ours, theirs = socket.socketpair()
pid = os.fork()
if pid == 0:
    ours.close()
    try:
        runner(theirs)
    finally:
        os._exit(0)
theirs.close()
with os.fdopen(test_fd) as f:  # the tests (expected values) exist in this process only
    TEST_CODE = f.read()
ours.settimeout(PER_TEST_S + 2)
buffer = bytearray()


def proxy(name):
    def call(*args, **kwargs):
        send(ours, {
            "name": name,
            "args": [encode(a) for a in args],
            "kwargs": {str(k): encode(v) for k, v in kwargs.items()},
        })
        reply = receive(ours, buffer)
        if "raised" in reply:
            kind, message = reply["raised"]
            error = getattr(builtins, kind, None) if isinstance(kind, str) else None
            if not (isinstance(error, type) and issubclass(error, Exception)):
                error = RuntimeError
            raise error(message)
        return decode(reply["value"])

    call.__name__ = name
    return call


verdict = {"passed": False, "error": None}
try:
    hello = receive(ours, buffer)
    if "load_error" in hello:
        raise ImportError(f"the solution did not load: {hello['load_error']}")
    namespace = {"__name__": "__check__"}
    for name, kind in hello["names"].items():
        namespace[str(name)] = proxy(str(name)) if kind[0] == "call" else decode(kind[1])
    if ENTRY not in namespace or hello["names"][ENTRY][0] != "call":
        raise NameError(f"the solution defines no function {ENTRY!r}")
    exec(compile(TEST_CODE, "<tests>", "exec"), namespace)
    if callable(namespace.get("check")):
        namespace["check"](namespace[ENTRY])
    verdict["passed"] = True
except BaseException as exc:
    verdict["error"] = f"{type(exc).__name__}: {exc}"[:300]
ours.close()
try:
    os.kill(pid, signal.SIGKILL)
except OSError:
    pass
marker = bytes(secret[:size]).decode()
os.write(out, (marker + json.dumps(verdict) + "\n").encode())
os._exit(0)
"""


def _assert_harness(entry: str, per_test_s: int) -> str:
    """The assertion harness with its two parameters filled in."""
    source = ASSERT_HARNESS_SOURCE.replace("__ENTRY__", repr(entry))
    return source.replace("__PER_TEST_S__", repr(int(per_test_s)))


@dataclass
class GradeResult:
    """How a solution did on the hidden tests."""

    passed: int
    total: int
    error: str | None = None  # the solution did not load, or the run failed as a whole
    failures: list[str] = field(default_factory=list)  # one line per failed test

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The last fenced code block of `text` (```python ... ```), or None.

    Without a fence, text that defines `entry_point` is taken as the code itself.
    """
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py")]
    if blocks:
        return blocks[-1]
    if entry_point and re.search(rf"^\s*def {re.escape(entry_point)}\s*\(", text, re.MULTILINE):
        return text
    return None


def grade(
    code: str,
    entry_point: str,
    tests: list[dict[str, Any]],
    sandbox: Any,
    limits: Any = None,
    per_test_s: int = 2,
    *,
    test_code: str | None = None,
) -> GradeResult:
    """Grade `code` in one `sandbox` run: against `tests` ({"args": [...], "expected": value})
    or, when given, against the assertion code `test_code` (then the result is 1/1 when every
    assertion passes, else 0/1; ``check(<entry_point>)`` is called when it defines ``check``).

    `sandbox` is a `forge_agent.sandbox.Sandbox` (its `run` starts and tears down a sandbox);
    a session works too (its workspace then carries over between gradings). Never raises for
    anything the solution does; `SandboxError` when the sandbox itself fails.
    """
    if test_code is not None:
        return _grade_assertions(code, entry_point, test_code, sandbox, limits, per_test_s)
    nonce = f"@@{secrets.token_hex(8)}@@"
    harness = HARNESS.format(nonce=nonce, entry=entry_point, per_test_s=per_test_s)
    inputs = json.dumps([t["args"] for t in tests])
    result = sandbox.run(
        code=harness, files={"solution.py": code, "inputs.json": inputs}, limits=limits
    )
    try:
        records, load_error = _records(result.stdout, nonce, len(tests))
    except ValueError as exc:
        return GradeResult(0, len(tests), failures=[f"forged or malformed grading record: {exc}"])
    if load_error is not None:
        return GradeResult(0, len(tests), error=load_error)
    passed, failures = 0, []
    for i, test in enumerate(tests):
        record = records.get(i)
        if record is None:
            failures.append(f"test {i}: no result ({result.describe()})")
        elif "error" in record:
            failures.append(f"test {i}: raised {record['error']}")
        elif _same(record["value"], test["expected"]):
            passed += 1
        else:
            failures.append(f"test {i}: wrong value")
    error = None if records else f"the tests did not run: {result.describe()}"
    return GradeResult(passed, len(tests), error=error, failures=failures)


def _records(stdout: str, nonce: str, total: int) -> tuple[dict[int, dict[str, Any]], str | None]:
    """The harness's records, each checked; raises ValueError for any record it never writes."""
    records: dict[int, dict[str, Any]] = {}
    load_error = None
    for line in stdout.splitlines():
        if not line.startswith(nonce):
            continue
        try:
            record = json.loads(line[len(nonce) :])
        except (ValueError, RecursionError):
            raise ValueError(f"not JSON: {line[len(nonce) : len(nonce) + 80]!r}") from None
        if not isinstance(record, dict):
            raise ValueError(f"not an object: {type(record).__name__}")
        keys = set(record)
        if keys == {"load_error"} and isinstance(record["load_error"], str):
            if load_error is not None or records:
                raise ValueError("a load error after other records")
            load_error = record["load_error"]
            continue
        if keys not in ({"i", "value"}, {"i", "error"}):
            raise ValueError(f"unexpected keys {sorted(keys)[:5]}")
        i = record["i"]
        if type(i) is not int or not 0 <= i < total:
            raise ValueError(f"test index {i!r} is not one of 0..{total - 1}")
        if "error" in record and not isinstance(record["error"], str):
            raise ValueError("an error that is not text")
        if i in records or load_error is not None:
            raise ValueError(f"a second record for test {i}")
        records[i] = record
    return records, load_error


def _grade_assertions(
    code: str, entry_point: str, test_code: str, sandbox: Any, limits: Any, per_test_s: int
) -> GradeResult:
    nonce = secrets.token_hex(16)
    harness = _assert_harness(entry_point, per_test_s)
    files = {"solution.py": code, "test_code.py": test_code, "nonce": nonce}
    result = sandbox.run(code=harness, files=files, limits=limits)
    verdicts = []
    for line in result.stdout.splitlines():
        if line.startswith(nonce):
            try:
                verdicts.append(json.loads(line[len(nonce) :]))
            except (ValueError, RecursionError):
                verdicts.append(None)
    if not verdicts:
        return GradeResult(0, 1, failures=[f"the tests did not finish: {result.describe()}"])
    verdict = verdicts[0]
    if (
        len(verdicts) != 1
        or not isinstance(verdict, dict)
        or set(verdict) != {"passed", "error"}
        or type(verdict["passed"]) is not bool
        or not isinstance(verdict["error"], (str, type(None)))
    ):
        return GradeResult(0, 1, failures=["forged or malformed grading record"])
    if verdict["passed"]:
        return GradeResult(1, 1)
    return GradeResult(0, 1, failures=[str(verdict["error"])[:300]])


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(expected, bool):
            return False
        if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
        return False
    if isinstance(expected, list) and isinstance(got, list):
        pairs = zip(got, expected, strict=False)
        return len(got) == len(expected) and all(_same(g, e) for g, e in pairs)
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected

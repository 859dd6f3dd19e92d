"""The reward-hack suite, verifiers environments: a scripted policy's tool calls that fail,
leave the schema, hang, or run code aimed at the host earn nothing and reach nothing
(docs/rewards.md, "Loopholes closed"). The rest of the suite: tests/test_reward_hacks.py."""

from __future__ import annotations

import asyncio
import json

import pytest

# ---------------------------------------------------------------------- verifiers tools
VF_TOOLS = "verifiers:tests.verifiers_envs.tools"  # its rubric pays 0.2 for any lookup call
VF_PYTHON = "verifiers:tests.verifiers_envs.pytool"  # its tool runs the policy's code


def _vf_call(name: str, arguments: str, call_id: str = "c0") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _vf_episode(env_id: str, calls: list[dict], answer: str, contains: str = ""):
    """Reset on the first task whose prompt contains `contains`, make each call in its own
    turn, then answer; returns (tool message contents, the last step)."""
    from forge_agent.env import make_env
    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.env.tasks import load_tasks

    env = make_env(env_id)
    task = next(
        t
        for t in load_tasks(ResolvedEnv.of(env_id), "train", 10, 0)
        if contains in str(t["prompt"])
    )

    async def play():
        await env.reset(task, 0)
        seen = []
        for call in calls:
            step = await env.step({"role": "assistant", "content": "", "tool_calls": [call]})
            assert not step.done, step
            seen += [m["content"] for m in step.messages]
        end = await env.step({"role": "assistant", "content": answer})
        await env.close()
        return seen, end

    try:
        return asyncio.run(play())
    finally:
        if getattr(env, "tools", None) is not None:
            env.tools.close()


@pytest.fixture(scope="module")
def paid_lookup():
    """The last step of an episode whose one lookup call succeeds. Played once for the module:
    a call that runs starts the env's tool process (verifiers' import: ~9 s a time)."""
    return _vf_episode(VF_TOOLS, [_vf_call("lookup", '{"word": "stone"}')], "no", "stone")[1]


@pytest.mark.parametrize(
    "arguments",
    ['{"word": 5}', '{"words": "stone"}', "{}", '{"word": "stone"', "not json"],
    ids=["mistyped", "unknown-argument", "missing-argument", "broken-json", "not-json"],
)
def test_a_failed_verifiers_tool_call_never_raises_the_reward(arguments, paid_lookup):
    # The env's rubric pays `called_lookup` 0.2 for any lookup call; a call that failed (off
    # the schema, unparseable) used to earn it (old main: {correct 1.0, called_lookup 0.2}).
    _, end = _vf_episode(VF_TOOLS, [_vf_call("lookup", arguments)], "<answer>S08</answer>", "stone")
    assert end.rewards == {"correct_answer": 1.0, "called_lookup": 0.0}, end.rewards
    assert end.info["failed_tool_calls"] == 1
    paid = paid_lookup
    assert paid.rewards == {"correct_answer": 0.0, "called_lookup": 0.2}  # a real call still pays


def test_a_verifiers_tool_call_off_its_schema_is_an_error_naming_the_tool_and_argument():
    # Old main ran lookup(5): "'int' object has no attribute 'strip'", naming neither.
    seen, _ = _vf_episode(VF_TOOLS, [_vf_call("lookup", '{"word": 5}')], "x", "stone")
    assert "'lookup'" in seen[0] and "argument 'word' must be a string" in seen[0], seen
    seen, _ = _vf_episode(VF_TOOLS, [_vf_call("lookup_all", '{"word": "x"}')], "x", "stone")
    assert seen[0] == "Error: unknown tool 'lookup_all'; available: lookup", seen


ATTACK = r"""
import os, socket
from forge_agent.env.resolved import ResolvedEnv
found = []
for path in ('/etc/shadow', '/root/.bashrc', '/root/.ssh/id_rsa', '/proc/1/environ'):
    try:
        found.append('READ ' + path + ' ' + str(len(open(path, 'rb').read())))
    except OSError as e:
        found.append('denied ' + path)
try:
    found.append('LISTED /root ' + ' '.join(os.listdir('/root')))
except OSError:
    found.append('denied /root')
for path in (HOST_FILE,):  # a host file in a folder only root may write
    try:
        open(path, 'w').write('x'); found.append('WROTE ' + path)
    except OSError:
        found.append('denied ' + path)
try:
    socket.create_connection(('127.0.0.1', 22), timeout=2); found.append('NET')
except OSError:
    found.append('no network')
found.append('SECRET ' + os.environ.get('FORGE_TEST_SECRET', 'none'))
found.append('uid ' + str(os.getuid()))
open('/tmp/left-behind', 'w').write('answer: 156')
result = '; '.join(found)
"""


def test_a_verifiers_tool_running_policy_code_cannot_reach_the_host(tmp_path, monkeypatch):
    from forge_agent.sandbox.forked import CALL_UID_BASE

    # Old main ran the code in the env worker itself: it read /etc/shadow and /root, wrote the
    # host file, saw the worker's environment, and left /tmp files for the next call to read.
    monkeypatch.setenv("FORGE_TEST_SECRET", "hunter2")
    host_file = str(tmp_path / "host-file.txt")
    code = f"HOST_FILE = {host_file!r}\n" + ATTACK
    later = "import os\nresult = str(os.path.exists('/tmp/left-behind'))"
    seen, _ = _vf_episode(
        VF_PYTHON,
        [
            _vf_call("python", json.dumps({"code": code})),
            _vf_call("python", json.dumps({"code": later}), "c1"),
        ],
        "<answer>156</answer>",
    )
    report, next_call = seen
    assert "READ" not in report and "WROTE" not in report and "NET" not in report, report
    uid = int(report.split("uid ", 1)[1].split(";")[0])
    assert "SECRET none" in report and uid >= CALL_UID_BASE, report  # a call's own user
    assert "LISTED /root .pyenv" in report or "denied /root" in report, (
        report
    )  # only the interpreter
    assert next_call == "False"  # nothing crosses calls
    assert not (tmp_path / "host-file.txt").exists()


def test_a_verifiers_tool_that_hangs_is_a_timed_out_call_not_a_hung_step(monkeypatch):
    # Old main ran the tool in the worker's event loop: a sleep(60) held the step 60 s (past
    # the step timeout: `policy_timeout` at best, the tool's bound never applied).
    import time

    from forge_agent.env.adapters.verifiers import VerifiersEnv

    monkeypatch.setattr(VerifiersEnv, "tool_timeout_s", 3.0, raising=False)
    spin = json.dumps({"code": "while True:\n    pass"})
    sleep = json.dumps({"code": "import time\ntime.sleep(60)"})
    start = time.monotonic()
    seen, end = _vf_episode(
        VF_PYTHON,
        [_vf_call("python", spin), _vf_call("python", sleep, "c1")],
        "<answer>156</answer>",
    )
    assert time.monotonic() - start < 30
    assert all("timed out after 3 s" in text for text in seen), seen
    assert end.done and end.info["failed_tool_calls"] == 2


# ---------------------------------------------------------------------- verifiers rubrics
VF_SPIRAL = "verifiers:tests.verifiers_envs.spiral"  # verifiers' ReasoningGymEnv: its scorer evals


def test_a_verifiers_rubric_that_evals_the_answer_runs_sandboxed(tmp_path):
    """Before: the rubric ran in the env worker, so reasoning-gym's `eval` of the answer wrote
    this file on the host."""
    target = tmp_path / "written_by_the_policy"
    attack = f"<answer>__import__('pathlib').Path('{target}').write_text('x')</answer>"
    _, end = _vf_episode(VF_SPIRAL, [], attack)
    assert not target.exists()
    assert end.done and sum(end.rewards.values()) == 0.0


def test_a_rubric_that_asks_a_model_is_refused_unless_allowed():
    """Before (main 475abf9): verifiers' `JudgeRubric` was scored in the env worker, on the
    host, with every other function of its rubric, silently. Now it is refused, naming the
    opt-in; with it, the env loads and scores there."""
    from forge_agent.env import EnvSetupError
    from forge_agent.env.adapters.verifiers import VerifiersEnv

    with pytest.raises(EnvSetupError, match=r"JudgeRubric.*allow_model_judge=true"):
        VerifiersEnv("tests.verifiers_envs.judged")
    env = VerifiersEnv("tests.verifiers_envs.judged", allow_model_judge=True)
    assert not env.sandboxed_rubric


# the policy's code writes on every descriptor it holds (the reply channel among them), then exits
WRITE_ON_THE_REPLY = """
import os
for fd in range(3, 64):
    try:
        os.write(fd, DATA)
    except OSError:
        pass
os._exit(0)
"""
REPLY_FORGERIES = {
    "forged-setup-error": b'{"ok": false, "setup_error": "no namespaces"}',
    "infra-key": b'{"infra": "the sandbox failed"}',
    "nested-past-the-stack": b'{"ok": true, "value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("data", list(REPLY_FORGERIES.values()), ids=list(REPLY_FORGERIES))
def test_class9_what_the_policys_code_writes_on_the_reply_channel_is_its_failure(data):
    """Before (c257d3d): a verifiers python tool whose code wrote a setup error, an `infra`
    key or JSON nested past the stack on its reply pipe made the call a `ToolServerError`
    (the episode `env_error`, excluded). The channel is the code's once it runs (the sandbox
    writes a start byte first): any reply but the sandbox's own shapes is the call's failure,
    an error message the policy reads, and the tool server lives on."""
    code = f"DATA = {data!r}\n" + WRITE_ON_THE_REPLY
    later = json.dumps({"code": "result = 6 * 7"})
    seen, end = _vf_episode(
        VF_PYTHON,
        [_vf_call("python", json.dumps({"code": code})), _vf_call("python", later, "c1")],
        "<answer>1</answer>",
    )
    forged, next_call = seen
    assert "reply" in forged and "wrote on the reply channel" in forged, forged
    assert next_call == "42"
    assert end.done and end.info["failed_tool_calls"] == 1, end.info

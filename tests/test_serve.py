"""`python -m apps.serve`: a checkpoint behind the endpoint, driven by the real `openai` client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import openai

from envs.calculator import generate_tasks
from tests.endpoint_agents import CALCULATOR_TOOL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_openai_clients_and_refuses_unknown_keys(policy_model_path, tmp_path):
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    argv = ["--model", str(policy_model_path), "--port", str(port), "--api-key", "test-key"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "apps.serve", *argv], stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                r = httpx.get(f"{base}/models", headers={"Authorization": "Bearer test-key"})
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "apps.serve did not come up in 180 s"
            time.sleep(0.5)
        assert r.json()["data"][0]["id"] == "forge-agent-policy"
        client = openai.OpenAI(base_url=base, api_key="test-key", max_retries=0)
        task = generate_tasks(1, seed=1)[0]
        reply = client.chat.completions.create(
            model="forge-agent-policy",
            messages=[{"role": "user", "content": task["prompt"]}],
            tools=[CALCULATOR_TOOL],
            max_tokens=64,
            logprobs=True,
        )
        assert reply.usage.completion_tokens == len(reply.choices[0].logprobs.content) > 0
        bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as exc:
            assert exc.status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode is not None


def test_serve_refuses_a_missing_folder_naming_the_checkpoints_there(tmp_path):
    (tmp_path / "checkpoints" / "step_000040" / "policy").mkdir(parents=True)
    missing = tmp_path / "checkpoints" / "step_40" / "policy"  # docs/agents.md had this form
    result = subprocess.run(
        [sys.executable, "-m", "apps.serve", "--model", str(missing), "--api-key", "KEY"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert f"--model={str(missing)!r}: no such folder" in line and "step_000040" in line, line
    assert "Repo id" not in result.stderr

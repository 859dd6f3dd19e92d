"""The OpenAI-compatible endpoint with the real `openai` client, the real vLLM CPU engine (in a
Monarch actor) and unmodified agent programs: token-exact recording, segments, errors."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from envs.calculator import generate_tasks
from forge_agent.endpoint import EndpointServer
from forge_agent.endpoint.config import EndpointConfig
from forge_agent.generator import GeneratorConfig
from forge_agent.rollout import ChatRenderer
from forge_agent.types import Trajectory
from tests.endpoint_agents import CALCULATOR_TOOL, calculator_agent, rewriting_agent

MAX_MODEL_LEN = GeneratorConfig().max_model_len  # the shared generator fixture's context


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


class RecordingGenerate:
    """The real generator actor, with every (prompt ids, completion) it served kept for the
    checks. `fail_next` makes the next call raise (fault injection for the 503 path)."""

    def __init__(self, generator) -> None:
        self.generator = generator
        self.calls: list[tuple[list[int], object]] = []
        self.seeds: list[int | None] = []
        self.fail_next = False

    async def __call__(self, prompt_ids, sampling, session):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected generator failure")
        completion = await self.generator.generate.call_one(prompt_ids, sampling, session)
        self.calls.append((list(prompt_ids), completion))
        self.seeds.append(sampling.seed)
        return completion


def _client(server: EndpointServer, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def _check_segment(traj: Trajectory, start: int, calls: list) -> int:
    """One segment starting at `start` is exactly: the first prompt, then per turn the sampled
    ids and the bridge tokens, where each later prompt extends the segment append-only.
    Returns where the segment ends."""
    ids = traj.token_ids
    for prompt, completion in calls:
        p, c = len(prompt), len(completion.token_ids)
        assert ids[start : start + p] == prompt  # every prompt is a prefix of the segment
        span = (start + p, start + p + c)
        assert ids[span[0] : span[1]] == completion.token_ids  # sampled ids, verbatim
        assert span in traj.turn_spans
        assert traj.logprobs[span[0] : span[1]] == completion.logprobs
        assert traj.versions[span[0] : span[1]] == completion.token_versions()
    last_prompt, last = calls[-1]
    return start + len(last_prompt) + len(last.token_ids)


def _check_mask(traj: Trajectory) -> None:
    n = len(traj.token_ids)
    assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
    sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
    assert {i for i, m in enumerate(traj.loss_mask) if m} == sampled
    for i in range(n):
        if not traj.loss_mask[i]:
            assert traj.logprobs[i] == 0.0 and traj.versions[i] == -1
        else:
            assert traj.logprobs[i] <= 0.0 and traj.versions[i] >= 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_unmodified_openai_agent_is_recorded_token_exactly(generator, renderer, stream):
    gen = RecordingGenerate(generator)

    async def run():
        async with EndpointServer(gen, renderer, MAX_MODEL_LEN) as server:
            assert server.base_url.startswith("http://127.0.0.1:")  # loopback by default
            for task in generate_tasks(12, seed=21):
                gen.calls.clear()
                session = server.open_session(task["task_id"])
                async with _client(server, session.key) as client:
                    answer = await calculator_agent(task, client, stream=stream)
                traj = server.close_session(session.key)
                if len(gen.calls) >= 2:
                    return task, answer, traj, list(gen.calls)
        return None

    found = asyncio.run(run())
    assert found is not None, "the warm-started policy never called the tool"
    _, answer, traj, calls = found
    first_messages = traj.messages[:2]
    assert calls[0][0] == renderer.render_prompt(first_messages, [CALCULATOR_TOOL])
    assert traj.segment_starts == [0]
    end = _check_segment(traj, 0, calls)
    assert end == len(traj.token_ids)  # nothing else was recorded
    _check_mask(traj)
    assert len(traj.turn_spans) == len(calls)
    assert traj.info["history_rewrites"] == 0
    # the transcript as the endpoint saw it: assistant turns with their tool calls
    assert traj.messages[2]["role"] == "assistant" and traj.messages[2].get("tool_calls")
    assert traj.messages[3]["role"] == "tool"
    assert traj.messages[-1]["role"] == "assistant"
    assert (traj.messages[-1]["content"] or "") == answer


def test_history_rewriting_agent_yields_two_correct_segments(generator, renderer):
    gen = RecordingGenerate(generator)
    task = generate_tasks(1, seed=4)[0]

    async def run():
        async with EndpointServer(gen, renderer, MAX_MODEL_LEN) as server:
            session = server.open_session(task["task_id"])
            async with _client(server, session.key) as client:
                await rewriting_agent(task, client)
            return server.close_session(session.key), server.endpoint.stats

    traj, stats = asyncio.run(run())
    assert len(gen.calls) == 2
    assert len(traj.segment_starts) == 2 and traj.segment_starts[0] == 0
    second_start = _check_segment(traj, 0, gen.calls[:1])
    assert traj.segment_starts[1] == second_start
    assert _check_segment(traj, second_start, gen.calls[1:]) == len(traj.token_ids)
    _check_mask(traj)
    assert traj.info["history_rewrites"] == 1 and stats["history_rewrites"] == 1
    rewritten = [
        {"role": "system", "content": traj.messages[0]["content"]},
        {"role": "user", "content": traj.messages[1]["content"]},
    ]
    assert "A first draft said" in rewritten[1]["content"]
    assert gen.calls[1][0] == renderer.render_prompt(rewritten, [CALCULATOR_TOOL])


def test_models_lists_the_policy(generator, renderer):
    async def run():
        gen = RecordingGenerate(generator)
        async with (
            EndpointServer(gen, renderer, MAX_MODEL_LEN) as s,
            _client(s, s.open_session().key) as client,
        ):
            return [m.id async for m in client.models.list()]

    assert asyncio.run(run()) == [EndpointConfig().model_name]


def _post(server: EndpointServer, key: str, body: bytes | dict) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{server.base_url}/chat/completions",
        content=content,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=60,
    )


def test_bad_requests_are_refused_with_the_field_named_and_record_nothing(generator, renderer):
    gen = RecordingGenerate(generator)
    task = generate_tasks(1, seed=8)[0]
    ok = {"model": "policy", "messages": [{"role": "user", "content": task["prompt"]}]}
    cases = {
        "malformed JSON": (b'{"messages": [', None),
        "wrong field type": ({**ok, "temperature": "hot"}, "temperature"),
        "unknown role": (
            {**ok, "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
        ),
        "n out of range": ({**ok, "n": 99}, "n"),
        "max_tokens zero": ({**ok, "max_tokens": 0}, "max_tokens"),
        "max_tokens past context": ({**ok, "max_tokens": MAX_MODEL_LEN}, "max_tokens"),
        "prompt past context": (
            {**ok, "messages": [{"role": "user", "content": "7 " * MAX_MODEL_LEN}]},
            "messages",
        ),
        "forced tool": ({**ok, "tool_choice": {"type": "function"}}, "tool_choice"),
    }

    async def run():
        async with EndpointServer(gen, renderer, MAX_MODEL_LEN) as server:
            session = server.open_session(task["task_id"])
            replies = {
                name: await asyncio.to_thread(_post, server, session.key, body)
                for name, (body, _) in cases.items()
            }
            unknown = await asyncio.to_thread(_post, server, "fa-not-a-key", ok)
            untouched = server.close_session(session.key)
            # the server is still usable: a fresh session works, and its key expires on close
            fresh = server.open_session(task["task_id"])
            client = _client(server, fresh.key)
            reply = await client.chat.completions.create(**ok, max_tokens=16, logprobs=True)
            traj = server.close_session(fresh.key)
            with pytest.raises(openai.AuthenticationError) as closed:
                await client.chat.completions.create(**ok, max_tokens=4)
            await client.close()
            return replies, unknown, untouched, reply, traj, closed.value

    replies, unknown, untouched, reply, traj, closed = asyncio.run(run())
    for name, (_, field) in cases.items():
        r = replies[name]
        assert r.status_code == 400, (name, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == field, (name, error)
        if field:
            assert field in error["message"]
    assert unknown.status_code == 401
    assert unknown.json()["error"]["code"] == "invalid_api_key"
    assert closed.status_code == 401 and closed.body["code"] == "invalid_api_key"
    assert untouched.token_ids == [] and untouched.num_sampled == 0
    assert traj.num_sampled == len(gen.calls[-1][1].token_ids) > 0
    # what the client sees is what was recorded
    shown = [t.logprob for t in reply.choices[0].logprobs.content]
    span = traj.turn_spans[0]
    assert len(shown) == span[1] - span[0]
    assert shown == traj.logprobs[span[0] : span[1]]


def test_expired_session_key_is_401_and_records_nothing(renderer):
    """A key past `session_ttl_s` is refused before anything is sampled (the request never
    reaches a generator, so none is started: `generate` raises if it is called)."""

    async def never_called(prompt_ids, sampling, session):
        raise AssertionError("an expired key reached the generator")

    messages = [{"role": "user", "content": "What is 2 + 2?"}]

    async def run():
        config = EndpointConfig(session_ttl_s=60.0)
        async with EndpointServer(never_called, renderer, MAX_MODEL_LEN, config) as server:
            expired, live = server.open_session("old"), server.open_session("new")
            expired.created -= 61.0  # opened 61 s ago
            async with _client(server, expired.key) as client:
                with pytest.raises(openai.AuthenticationError) as refused:
                    await client.chat.completions.create(model="p", messages=messages)
            async with _client(server, live.key) as client:  # the server goes on serving
                models = [m.id async for m in client.models.list()]
            return refused.value, models, len(server.endpoint.sessions), expired.trajectory

    refused, models, open_sessions, recorded = asyncio.run(run())
    assert refused.status_code == 401 and refused.body["code"] == "invalid_api_key"
    assert "expired" in refused.body["message"]
    assert models == [EndpointConfig().model_name]
    assert open_sessions == 1  # the expired session was dropped, the live one kept
    assert recorded.token_ids == [] and recorded.num_sampled == 0


def test_unknown_routes_answer_openai_style_errors_naming_the_route(renderer):
    """A path or method the endpoint does not serve is a 404 / 405 in OpenAI's error shape that
    names what was asked and what is served (no generator: nothing is sampled)."""

    async def never_called(prompt_ids, sampling, session):
        raise AssertionError("an unknown route reached the generator")

    async def run():
        async with EndpointServer(never_called, renderer, MAX_MODEL_LEN) as server:
            key = server.open_session("t").key
            async with _client(server, key) as client:
                with pytest.raises(openai.NotFoundError) as missing:
                    await client.completions.create(model="p", prompt="hi")
            async with httpx.AsyncClient(base_url=server.base_url) as http:
                wrong = await http.get("/chat/completions", headers={"Authorization": key})
            return missing.value, wrong.status_code, wrong.json()

    missing, status, body = asyncio.run(run())
    assert missing.status_code == 404 and missing.body["code"] == "not_found"
    assert "POST /v1/completions" in missing.body["message"]
    assert "POST /v1/chat/completions" in missing.body["message"]
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    assert "GET /v1/chat/completions" in body["error"]["message"]


def test_generator_failure_is_503_and_the_session_goes_on(generator, renderer):
    gen = RecordingGenerate(generator)
    task = generate_tasks(1, seed=9)[0]
    messages = [{"role": "user", "content": task["prompt"]}]

    async def run():
        async with EndpointServer(gen, renderer, MAX_MODEL_LEN) as server:
            session = server.open_session(task["task_id"])
            client = _client(server, session.key)
            gen.fail_next = True
            with pytest.raises(openai.InternalServerError) as failed:
                await client.chat.completions.create(model="p", messages=messages, max_tokens=8)
            after = await client.chat.completions.create(model="p", messages=messages, max_tokens=8)
            await client.close()
            return failed.value, after, server.close_session(session.key)

    failed, after, traj = asyncio.run(run())
    assert failed.status_code == 503
    assert failed.body["type"] == "server_error" and "injected" in failed.body["message"]
    assert after.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert len(gen.calls) == 1 and len(traj.turn_spans) == 1
    assert traj.segment_starts == [0]  # the failed request left no trace
    assert traj.num_sampled == len(gen.calls[0][1].token_ids)


def test_n_choices_stop_strings_and_the_chosen_branch_continues(generator, renderer):
    gen = RecordingGenerate(generator)
    task = generate_tasks(1, seed=12)[0]
    messages = [{"role": "user", "content": task["prompt"]}]

    async def run():
        async with EndpointServer(gen, renderer, MAX_MODEL_LEN) as server:
            session = server.open_session(task["task_id"])
            client = _client(server, session.key)
            many = await client.chat.completions.create(
                model="p", messages=messages, max_tokens=96, n=3, seed=5, temperature=1.0
            )
            pick = many.choices[2].message.model_dump(exclude_none=True)
            follow = [*messages, pick, {"role": "user", "content": "Again."}]
            stopped = await client.chat.completions.create(
                model="p", messages=follow, max_tokens=24, stop=["1", "2", "3", "4"]
            )
            await client.close()
            return many, stopped, server.close_session(session.key)

    many, stopped, traj = asyncio.run(run())
    assert len(many.choices) == 3
    assert traj.segment_starts == [0]  # the client continued choice 2: still one segment
    chosen = gen.calls[gen.seeds.index(5 + 2)][1]  # choice i is sampled with seed + i
    s, e = traj.turn_spans[0]
    assert traj.token_ids[s:e] == chosen.token_ids
    text = stopped.choices[0].message.content or ""
    assert not any(d in text for d in "1234")
    s2, e2 = traj.turn_spans[1]
    assert traj.token_ids[s2:e2] == gen.calls[3][1].token_ids[: e2 - s2]


def _raw_post(server: EndpointServer, headers: dict[str, str], body: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        content=body,
        headers={"Content-Type": "application/json", **headers},
        timeout=60,
    )


def test_hostile_requests_get_openai_shaped_errors_naming_the_field(renderer):
    """What an outside attack sent (issue 24 #4): each is refused before any generation, in
    OpenAI's error shape, naming the field; the server keeps serving."""

    async def never_called(prompt_ids, sampling, session):
        raise AssertionError("a hostile request reached the generator")

    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    deep_schema: dict = {"type": "string"}
    for _ in range(200):
        deep_schema = {"type": "object", "properties": {"a": deep_schema}}
    tool = {"type": "function", "function": {"name": "f", "parameters": deep_schema}}
    ok = json.dumps({"model": "p", "messages": messages})
    cases = {  # name: (headers beyond the key, body, status, param)
        "deep JSON": ({}, b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None),
        "lone surrogate model": (
            {}, ok.replace('"p"', '"\\ud800"').encode(), 400, "model"
        ),
        "lone surrogate content": (
            {}, ok.replace("What is", "\\udfff").encode(), 400, "messages[0].content"
        ),
        "deep tool parameters": (
            {}, json.dumps({"messages": messages, "tools": [tool]}).encode(), 400,
            "tools[0].function.parameters.properties.a.properties.a",
        ),
        "8 MB message": (
            {}, json.dumps({"messages": [{"role": "user", "content": "7 " * (4 << 20)}]}).encode(),
            413, None,
        ),
        "key without the bearer scheme": ({"bare": "1"}, ok.encode(), 401, None),
    }  # fmt: skip

    async def run():
        async with EndpointServer(never_called, renderer, MAX_MODEL_LEN) as server:
            key = server.open_session("t").key
            replies = {}
            for name, (extra, body, _, _) in cases.items():
                auth = key if extra.get("bare") else f"Bearer {key}"
                replies[name] = await asyncio.to_thread(
                    _raw_post, server, {"Authorization": auth}, body
                )
            async with _client(server, key) as client:  # still serving
                models = [m.id async for m in client.models.list()]
            return replies, models

    replies, models = asyncio.run(run())
    for name, (_, _, status, param) in cases.items():
        r = replies[name]
        assert r.status_code == status, (name, r.status_code, r.text[:300])
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, (name, error)
        assert error["param"] == param or (param and error["param"].startswith(param)), (
            name,
            error,
        )
    assert "Bearer" in replies["key without the bearer scheme"].json()["error"]["message"]
    assert replies["8 MB message"].json()["error"]["code"] == "request_too_large"
    assert models == [EndpointConfig().model_name]


def test_one_huge_request_does_not_delay_others(renderer):
    """Benchmark row: while 8 MB requests arrive, a concurrent small request still answers
    at once (before the body bound, one 8 MB message blocked others for 10.4 s)."""

    async def never_called(prompt_ids, sampling, session):
        raise AssertionError("unreachable")

    huge = json.dumps({"messages": [{"role": "user", "content": "7 " * (4 << 20)}]}).encode()

    def small_request(server: EndpointServer, headers: dict[str, str]) -> tuple[int, float]:
        time.sleep(1.0)  # the huge bodies have arrived and are being handled
        start = time.perf_counter()
        reply = httpx.get(f"{server.base_url}/models", headers=headers, timeout=60)
        return reply.status_code, time.perf_counter() - start

    async def run():
        async with EndpointServer(never_called, renderer, MAX_MODEL_LEN) as server:
            key = server.open_session("t").key
            headers = {"Authorization": f"Bearer {key}"}
            flood = [
                asyncio.to_thread(_raw_post, server, headers, huge) for _ in range(4)
            ]  # clients in threads of their own: only the server runs on this loop
            small = asyncio.to_thread(small_request, server, headers)
            *replies, (status, latency) = await asyncio.gather(*flood, small)
            return status, latency, [r.status_code for r in replies]

    status, latency, statuses = asyncio.run(run())
    print(f"small request latency during 4 x 8 MB requests: {latency * 1000:.1f} ms")
    assert status == 200 and statuses == [413] * 4
    assert latency < 1.0, latency


def test_the_stop_string_cut_is_not_quadratic(renderer):
    """The shortest prefix holding a stop string, found in O(log n) decodes: 16 completions
    of 2,000 tokens with a stop string near the end took 5.2 s with one decode per prefix."""
    from forge_agent.endpoint.app import Endpoint

    async def never_called(prompt_ids, sampling, session):
        raise AssertionError("unreachable")

    endpoint = Endpoint(never_called, renderer, MAX_MODEL_LEN)
    encode = renderer.tokenizer.encode
    ids = encode("count " * 1990, add_special_tokens=False)[:1990]
    ids += encode(" now STOP and more words after it", add_special_tokens=False)
    decode = renderer.tokenizer.decode
    shortest = next(k for k in range(1900, len(ids) + 1) if "STOP" in decode(ids[:k]))
    start = time.perf_counter()
    cuts = [endpoint._cut_at_stop(ids, ["never", "STOP"]) for _ in range(16)]
    elapsed = time.perf_counter() - start
    print(f"16 stop cuts of {len(ids)} tokens: {elapsed * 1000:.1f} ms")
    assert cuts == [(shortest, "STOP")] * 16
    assert endpoint._cut_at_stop(ids, ["absent"]) == (len(ids), None)
    assert elapsed < 1.0, elapsed

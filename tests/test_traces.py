"""Trace JSONL round trip and the HTML trace page (escaping, token highlighting, layout)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from apps.traces.__main__ import main as traces_main
from forge_agent.observability.trace_html import (
    byte_decode,
    load_token_decoder,
    policy_lag,
    render_html,
    token_kinds,
)
from forge_agent.observability.traces import (
    TraceWriter,
    read_traces,
    trace_record,
    trajectory_from_record,
)
from forge_agent.types import Status, Trajectory

PROMPT = (
    "<|im_start|>user\nWhat is 17 * 23? <script>alert('x')</script><|im_end|>\n"
    "<|im_start|>assistant\n"
)
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"}}</tool_call>'
TOOL = "<|im_end|>\n<|im_start|>user\n<tool_response>391</tool_response><|im_end|>\n"
ANSWER = "The answer is 391."


def make_trajectory(task_id: str = "calc-0", reward: float = 1.0) -> Trajectory:
    """A two-turn calculator episode over a byte-level toy tokenizer (one token per byte)."""
    traj = Trajectory(task_id=task_id, group_id="g0")
    for kind, text, version in [
        ("p", PROMPT, -1),
        ("s", CALL, 3),
        ("e", TOOL, -1),
        ("s", ANSWER, 4),
    ]:
        ids = list(text.encode("latin-1"))
        start = len(traj.token_ids)
        sampled = kind == "s"
        traj.token_ids += ids
        traj.loss_mask += [int(sampled)] * len(ids)
        traj.logprobs += [-0.5 if sampled else 0.0] * len(ids)
        traj.versions += [version] * len(ids)
        if sampled:
            traj.turn_spans.append((start, len(traj.token_ids)))
    traj.messages = [
        {"role": "user", "content": "What is 17 * 23? <script>alert('x')</script>"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'},
                }
            ],
        },
        {"role": "tool", "content": "391", "tool_call_id": "call_0", "name": "calculator"},
        {"role": "assistant", "content": ANSWER},
    ]
    traj.reward_components = {"correct": reward, "format": 0.25}
    traj.reward = reward + 0.25
    traj.tool_call_count = 1
    traj.timings = {"generate": 0.4, "env": 0.02}
    return traj


class SpanCollector(HTMLParser):
    """Collects the text of every token span, keyed by its kind class."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[str, str]] = []  # (kind class, text)
        self._open: str | None = None
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        classes = (dict(attrs).get("class") or "").split()
        if tag == "span" and "tok" in classes:
            self._open = next(c for c in classes if c.startswith("tok-"))
            self.spans.append((self._open, ""))

    def handle_endtag(self, tag):
        if tag == "span":
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            kind, text = self.spans[-1]
            self.spans[-1] = (kind, text + data)


def stream_text(page: str, kind: str) -> str:
    """Concatenated text of the card token spans of one kind (the legend's spans excluded)."""
    parser = SpanCollector()
    parser.feed(page.split("<main>", 1)[1])
    return "".join(text for k, text in parser.spans if k == kind)


# --- JSONL ----------------------------------------------------------------------------------


def test_jsonl_round_trip_restores_the_trajectory(tmp_path):
    trajs = [make_trajectory("a"), make_trajectory("b", reward=0.0)]
    trajs[1].status = Status.TRUNCATED_LENGTH
    with TraceWriter(tmp_path / "traces" / "t.jsonl") as writer:
        for traj in trajs:
            writer.write(traj)

    records = read_traces(tmp_path / "traces" / "t.jsonl")

    assert [trajectory_from_record(r) for r in records] == trajs


def test_each_record_carries_counts_versions_rewards_timings_and_extra():
    traj = make_trajectory()

    rec = trace_record(traj, extra={"step": 7, "policy_version": 6})

    assert rec["num_tokens"] == len(traj.token_ids)
    assert rec["num_sampled"] == len(CALL) + len(ANSWER)
    assert rec["num_turns"] == 2
    assert (rec["min_version"], rec["max_version"]) == (3, 4)
    assert rec["reward_components"] == {"correct": 1.0, "format": 0.25}
    assert rec["status"] == "ok"
    assert rec["timings"] == {"generate": 0.4, "env": 0.02}
    assert rec["extra"] == {"step": 7, "policy_version": 6}
    assert rec["messages"][2]["role"] == "tool"


def test_writer_appends_across_reopens_and_reader_returns_the_last_n(tmp_path):
    path = tmp_path / "t.jsonl"
    for name in ["a", "b", "c"]:
        with TraceWriter(path) as writer:
            writer.write(make_trajectory(name))

    assert [r["task_id"] for r in read_traces(path)] == ["a", "b", "c"]
    assert [r["task_id"] for r in read_traces(path, last=2)] == ["b", "c"]


def test_a_writer_keeping_n_leaves_the_last_n_episodes_in_the_file(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, keep=3) as writer:
        for i in range(10):
            writer.write(make_trajectory(f"e{i}"))
            assert len(path.read_text().splitlines()) < 2 * 3  # never twice the kept count

    assert [r["task_id"] for r in read_traces(path)] == ["e7", "e8", "e9"]


def test_a_resumed_writer_counts_the_episodes_already_in_the_file(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        for i in range(5):
            writer.write(make_trajectory(f"old{i}"))
    with TraceWriter(path, keep=2) as writer:
        writer.write(make_trajectory("new"))

    assert [r["task_id"] for r in read_traces(path)] == ["old4", "new"]


def test_the_run_trace_page_shows_only_the_last_traces_last_episodes(tmp_path):
    from forge_agent.run.outputs import write_trace_page

    with TraceWriter(tmp_path / "traces.jsonl") as writer:
        for i in range(9):
            writer.write(make_trajectory(f"ep{i}"))
    write_trace_page(tmp_path, 2, decode=None)

    page = (tmp_path / "traces.html").read_text()
    assert page.count('<article class="card') == 2
    assert "ep8" in page and "ep6" not in page


def test_numpy_values_in_info_are_written_as_plain_json(tmp_path):
    traj = make_trajectory()
    traj.info = {"score": np.float32(0.5), "ids": np.arange(3)}
    with TraceWriter(tmp_path / "t.jsonl") as writer:
        writer.write(traj, extra={"step": np.int64(2)})

    (rec,) = read_traces(tmp_path / "t.jsonl")

    assert rec["info"] == {"score": 0.5, "ids": [0, 1, 2]}
    assert rec["extra"] == {"step": 2}


def test_reader_skips_a_truncated_last_line_left_by_a_crash(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        writer.write(make_trajectory("a"))
    with path.open("a") as f:
        f.write('{"task_id": "b", "tok')

    assert [r["task_id"] for r in read_traces(path)] == ["a"]


def test_reader_rejects_a_corrupt_line_in_the_middle_naming_it(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"task_id": "a"}\nnot json\n{"task_id": "c"}\n')

    with pytest.raises(ValueError, match=r"t\.jsonl:2"):
        read_traces(path)


# --- HTML -----------------------------------------------------------------------------------


def test_script_in_a_trajectory_renders_as_text_not_markup():
    traj = make_trajectory(task_id="<script>alert(1)</script>")
    traj.reward_components["<img src=x onerror=alert(2)>"] = 1.0
    traj.messages[1]["tool_calls"][0]["function"]["name"] = "<script>calc</script>"

    for decode in [None, byte_decode]:
        page = render_html([traj], decode=decode)
        parser = SpanCollector()
        parser.feed(page)

        assert "script" not in parser.tags and "img" not in parser.tags
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "&lt;img src=x onerror=alert(2)&gt;" in page


def test_sampled_tokens_are_highlighted_apart_from_prompt_and_env_tokens():
    page = render_html([make_trajectory()], decode=byte_decode)

    assert stream_text(page, "tok-sampled") == CALL + ANSWER
    assert stream_text(page, "tok-prompt") == PROMPT
    assert stream_text(page, "tok-env") == TOOL


def test_token_kinds_split_unsampled_tokens_at_the_first_sampled_token():
    assert token_kinds([0, 0, 1, 1, 0, 1, 0]) == [
        "prompt",
        "prompt",
        "sampled",
        "sampled",
        "env",
        "sampled",
        "env",
    ]


def test_without_a_decoder_the_page_shows_the_messages_view_open_and_no_token_spans():
    page = render_html([make_trajectory()])

    assert stream_text(page, "tok-sampled") == ""
    assert '<details class="messages" open>' in page
    assert "pass a tokenizer" in page


def test_tool_calls_and_tool_results_are_marked_distinctly():
    page = render_html([make_trajectory()])

    assert '<div class="tool-call"><span class="label">tool call</span> ' in page
    assert '<span class="tool-name">calculator</span>' in page
    assert '"expression": "17*23"' in page.replace("&quot;", '"')
    assert '<div class="msg msg-tool"><div class="role">tool result · calculator' in page


def test_card_shows_status_reward_breakdown_versions_lag_and_timings():
    rec = trace_record(make_trajectory(), extra={"policy_version": 6, "step": 2})
    rec["status"] = "env_timeout"

    page = render_html([rec])

    assert page.count('<article class="card') == 1
    assert '<span class="badge status st-infra">env_timeout</span>' in page
    assert "<td>correct</td>" in page and "<td>format</td>" in page
    assert "v3\u2013v4" in page
    assert "policy lag <b>3</b>" in page
    assert "<td>generate</td>" in page


def test_policy_lag_is_learner_version_minus_oldest_sampled_version_when_known():
    rec = trace_record(make_trajectory(), extra={"policy_version": 10})
    assert policy_lag(rec) == 7
    assert policy_lag(trace_record(make_trajectory())) is None


def test_cli_writes_a_page_of_the_last_n_episodes(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        for name in ["first", "second", "third"]:
            writer.write(make_trajectory(name))

    out = traces_main(
        [str(path), "--out", str(tmp_path / "p.html"), "--tokenizer", "bytes", "--last", "2"]
    )

    page = Path(out).read_text()
    assert page.count('<article class="card') == 2
    assert "first" not in page and "third" in page
    assert stream_text(page, "tok-sampled") == (CALL + ANSWER) * 2
    assert "wrote" in capsys.readouterr().out


def test_cli_decodes_tokens_with_a_tokenizer_json_file(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"<unk>": 0, "hello": 1, "world": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.save(str(tmp_path / "tokenizer.json"))
    traj = Trajectory(
        task_id="t",
        group_id="g",
        token_ids=[1, 2],
        loss_mask=[0, 1],
        logprobs=[0.0, -0.1],
        versions=[-1, 0],
        turn_spans=[(1, 2)],
    )
    with TraceWriter(tmp_path / "t.jsonl") as writer:
        writer.write(traj)

    out = traces_main([str(tmp_path / "t.jsonl"), "--tokenizer", str(tmp_path / "tokenizer.json")])

    page = Path(out).read_text()
    assert out == tmp_path / "t.html"
    assert stream_text(page, "tok-prompt") == "hello"
    assert stream_text(page, "tok-sampled") == "world"


def test_records_that_lack_optional_keys_still_render():
    page = render_html([{"task_id": "old", "status": "ok", "reward": 0.5}], decode=byte_decode)
    assert page.count('<article class="card') == 1
    assert '<span class="task">old</span>' in page


def test_a_tokenizer_folder_is_loaded_with_transformers_for_the_token_view(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"<unk>": 0, "hello": 1, "world": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.save_pretrained(tmp_path / "tok")

    decode = load_token_decoder(tmp_path / "tok")

    assert [decode([i]) for i in (1, 2)] == ["hello", "world"]


def test_an_unknown_tokenizer_path_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_token_decoder(tmp_path / "nowhere")

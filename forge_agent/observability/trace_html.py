"""A self-contained HTML page of trajectory traces: one card per episode.

Each card shows the status, reward and its breakdown, policy versions and lag, counts and
timings, then the episode itself:
- with a per-token `decode`, the token stream, where sampled tokens (loss_mask = 1, the ones the
  trainer learns from) are highlighted apart from prompt tokens (before the first sampled token)
  and env tokens (tool results, user turns and template tokens between sampled turns);
- always, the messages, with tool calls and tool results set apart from plain text
  (open by default when there is no `decode`).

The page has inline CSS, no scripts and no external assets; every piece of trajectory text is
HTML-escaped, so a trajectory that contains `<script>` shows it as text.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forge_agent.observability.traces import trace_record
from forge_agent.types import Trajectory

Decode = Callable[[list[int]], str]
"""Maps token ids to text; called with one id at a time to label each token."""

TOKEN_CLASSES = {"sampled": "tok-sampled", "prompt": "tok-prompt", "env": "tok-env"}

_CSS = """
:root { --ink:#1d2330; --muted:#6b7280; --line:#e3e6ec; --card:#fff; --bg:#f4f5f8;
  --sampled:#b8ecc6; --env:#fde2b3; --prompt:#eef0f4; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header.page { padding: 18px 28px 10px; }
header.page h1 { margin: 0 0 6px; font-size: 20px; }
.summary { color: var(--muted); }
.summary b { color: var(--ink); }
.legend { margin-top: 8px; display: flex; gap: 14px; flex-wrap: wrap; font-size: 13px; }
main { padding: 6px 28px 28px; display: flex; flex-direction: column; gap: 16px; }
.card { background: var(--card); border: 1px solid var(--line); border-left: 5px solid #9ca3af;
  border-radius: 8px; padding: 14px 18px; box-shadow: 0 1px 2px rgba(0,0,0,.04); }
.card.st-ok { border-left-color: #1f9d55; }
.card.st-truncated { border-left-color: #d98a00; }
.card.st-infra { border-left-color: #d64545; }
.card-head { display: flex; align-items: baseline; gap: 12px; flex-wrap: wrap; }
.card-head .ep { color: var(--muted); font-variant-numeric: tabular-nums; }
.card-head .task { font-weight: 600; font-size: 15px; }
.card-head .group { color: var(--muted); }
.card-head .reward-total { margin-left: auto; font-size: 18px; font-weight: 650;
  font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; background: #e5e7eb; }
.badge.st-ok { background: #d6f5e0; color: #146c3a; }
.badge.st-truncated { background: #fdebc8; color: #8a5600; }
.badge.st-infra { background: #fbd5d5; color: #9b1c1c; }
.facts { display: flex; flex-wrap: wrap; gap: 6px 22px; margin: 8px 0 4px; color: var(--muted); }
.facts b { color: var(--ink); font-weight: 600; font-variant-numeric: tabular-nums; }
.panels { display: flex; flex-wrap: wrap; gap: 10px 40px; margin: 8px 0; }
.panels h3, details > summary { font-size: 13px; font-weight: 650; margin: 0 0 4px;
  color: var(--ink); }
table.kv { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.kv td { padding: 1px 10px 1px 0; vertical-align: middle; }
table.kv td.num { text-align: right; }
table.kv tr.total td { border-top: 1px solid var(--line); font-weight: 650; }
.bar { display: inline-block; height: 8px; border-radius: 3px; background: #60a5fa; }
.bar.neg { background: #f87171; }
details { margin-top: 10px; }
details > summary { cursor: pointer; }
.stream { white-space: pre-wrap; word-break: break-word; margin-top: 6px; padding: 10px 12px;
  border: 1px solid var(--line); border-radius: 6px; background: #fcfcfd;
  font: 12.5px/1.7 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
.tok { border-radius: 2px; }
.tok-prompt { color: #4b5563; background: var(--prompt); }
.tok-env { background: var(--env); }
.tok-sampled { background: var(--sampled); color: #0b3d1e; }
.tok-blank { color: var(--muted); }
.seg-start { border-left: 2px solid #7c3aed; padding-left: 1px; }
.msg { margin: 6px 0; padding: 6px 10px; border-radius: 6px; border: 1px solid var(--line);
  background: #fafafa; }
.msg .role { font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .04em;
  color: var(--muted); }
.msg .content { white-space: pre-wrap; word-break: break-word; }
.msg-system { background: #f3f4f6; }
.msg-user { background: #eef4ff; border-color: #cfdcf7; }
.msg-assistant { background: #effaf2; border-color: #c4ebd0; }
.msg-tool { background: #fff7e8; border-color: #f4d9a6; }
.tool-call { margin-top: 6px; padding: 6px 8px; border: 1px dashed #7c3aed; border-radius: 6px;
  background: #f7f3ff; }
.tool-call .label, .msg-tool .role { color: #6d28d9; }
.tool-call .label { font-size: 11px; font-weight: 700; text-transform: uppercase; }
.tool-name { font-weight: 650; font-family: ui-monospace, Menlo, Consolas, monospace; }
.call-id { color: var(--muted); font-size: 12px; font-weight: 400; text-transform: none;
  letter-spacing: 0; }
pre { margin: 4px 0 0; white-space: pre-wrap; word-break: break-word;
  font: 12px/1.5 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
.note { color: var(--muted); font-style: italic; }
.seats { display: flex; gap: 16px; align-items: flex-start; }
.seats > .card { flex: 1 1 0; min-width: 0; }
.badge.seat { background: #e0e7ff; color: #3730a3; }
"""


def _e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def _status_class(status: str) -> str:
    if status == "ok":
        return "st-ok"
    if status.startswith("truncated") or status in ("prompt_too_long", "forfeit"):
        return "st-truncated"
    return "st-infra"


def _css_token(text: str) -> str:
    """A class-name-safe form of a free-form label (a message role)."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower()) or "unknown"


def policy_lag(rec: dict[str, Any]) -> int | None:
    """Learner version at write time minus the oldest version that sampled a token, if known."""
    current = (rec.get("extra") or {}).get("policy_version")
    oldest = rec.get("min_version", -1)
    if current is None or oldest is None or oldest < 0:
        return None
    return int(current) - int(oldest)


def token_kinds(loss_mask: Sequence[int]) -> list[str]:
    """Per-token kind: "sampled" (loss_mask 1), "prompt" (before the first sampled) or "env"."""
    kinds: list[str] = []
    seen_sampled = False
    for m in loss_mask:
        if m:
            seen_sampled = True
            kinds.append("sampled")
        else:
            kinds.append("env" if seen_sampled else "prompt")
    return kinds


def _render_token_stream(rec: dict[str, Any], decode: Decode) -> str:
    ids = rec.get("token_ids") or []
    mask = rec.get("loss_mask") or [0] * len(ids)
    logprobs = rec.get("logprobs") or []
    versions = rec.get("versions") or []
    seg_starts = set(rec.get("segment_starts") or []) - {0}
    cache: dict[int, str] = {}
    out: list[str] = []
    for i, (tid, kind) in enumerate(zip(ids, token_kinds(mask), strict=False)):
        text = cache.get(tid)
        if text is None:
            try:
                text = decode([tid])
            except Exception:  # an id the tokenizer does not know: show the id instead
                text = f"\u27e8{tid}\u27e9"
            cache[tid] = text
        tip = f"#{i} id={tid} {kind}"
        if kind == "sampled":
            if i < len(logprobs):
                tip += f" logprob={logprobs[i]:.3f}"
            if i < len(versions):
                tip += f" v{versions[i]}"
        classes = f"tok {TOKEN_CLASSES[kind]}"
        if i in seg_starts:
            classes += " seg-start"
            tip += " (new segment)"
        if text == "":
            classes += " tok-blank"
            text = "\u2205"
        out.append(f'<span class="{classes}" title="{_e(tip)}">{_e(text)}</span>')
    return "".join(out)


def _render_tool_call(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    name = fn.get("name", call.get("name", "?"))
    args = fn.get("arguments", call.get("arguments", ""))
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):  # malformed: shown as written
            args = json.loads(args)
    args_text = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
    call_id = call.get("id")
    id_html = f' <span class="call-id">{_e(call_id)}</span>' if call_id else ""
    return (
        f'<div class="tool-call"><span class="label">tool call</span> '
        f'<span class="tool-name">{_e(name)}</span>{id_html}'
        f'<pre class="tool-args">{_e(args_text)}</pre></div>'
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(
            p.get("text", json.dumps(p)) if isinstance(p, dict) else str(p) for p in content
        )
    return json.dumps(content, ensure_ascii=False)


def _render_message(msg: dict[str, Any]) -> str:
    role = str(msg.get("role", "?"))
    label = role
    if role == "tool":
        label = "tool result"
        if msg.get("name"):
            label += f" \u00b7 {msg['name']}"
    call_id = msg.get("tool_call_id")
    id_html = f' <span class="call-id">{_e(call_id)}</span>' if call_id else ""
    text = _content_text(msg.get("content"))
    parts = [
        f'<div class="msg msg-{_css_token(role)}"><div class="role">{_e(label)}{id_html}</div>',
        f'<div class="content">{_e(text)}</div>' if text else "",
        *(_render_tool_call(c) for c in msg.get("tool_calls") or [] if isinstance(c, dict)),
        "</div>",
    ]
    return "".join(parts)


def _kv_table(rows: list[tuple[str, str]], css: str, total: tuple[str, str] | None = None) -> str:
    body = "".join(f'<tr><td>{_e(k)}</td><td class="num">{v}</td></tr>' for k, v in rows)
    if total:
        body += f'<tr class="total"><td>{_e(total[0])}</td><td class="num">{total[1]}</td></tr>'
    return f'<table class="kv {css}">{body}</table>'


def _render_rewards(rec: dict[str, Any]) -> str:
    comps = rec.get("reward_components") or {}
    scale = max((abs(float(v)) for v in comps.values()), default=0.0) or 1.0
    rows = []
    for name in sorted(comps):
        value = float(comps[name])
        width = round(80 * abs(value) / scale)
        bar = f'<span class="bar{" neg" if value < 0 else ""}" style="width:{width}px"></span>'
        rows.append((name, f'{_e(_fmt(value))}</td><td class="barcell">{bar}'))
    if not rows:
        rows.append(("(no components)", ""))
    table = _kv_table(rows, "reward-breakdown", total=("reward", _e(_fmt(rec.get("reward", 0.0)))))
    return f'<section class="rewards"><h3>Reward breakdown</h3>{table}</section>'


def _render_timings(rec: dict[str, Any]) -> str:
    timings = rec.get("timings") or {}
    if not timings:
        return '<section class="timings"><h3>Timings</h3><span class="note">none</span></section>'
    rows = [(k, _e(_fmt(timings[k])) + " s") for k in sorted(timings)]
    return f'<section class="timings"><h3>Timings</h3>{_kv_table(rows, "timings")}</section>'


def _render_card(index: int, rec: dict[str, Any], decode: Decode | None) -> str:
    status = str(rec.get("status", "?"))
    st = _status_class(status)
    ids = rec.get("token_ids") or []
    mask = rec.get("loss_mask") or []
    num_sampled = rec.get("num_sampled", sum(mask))
    lo, hi = rec.get("min_version", -1), rec.get("max_version", -1)
    lag = policy_lag(rec)
    extra = rec.get("extra") or {}
    facts = [
        ("advantage", _fmt(rec.get("advantage", 0.0))),
        ("tokens", f"{num_sampled} sampled / {rec.get('num_tokens', len(ids))}"),
        ("turns", str(rec.get("num_turns", len(rec.get("turn_spans") or [])))),
        ("tool calls", f"{rec.get('tool_call_count', 0)} ({rec.get('tool_error_count', 0)} err)"),
        ("versions", f"v{lo}" if lo == hi else f"v{lo}\u2013v{hi}"),
        ("policy lag", "\u2014" if lag is None else str(lag)),
    ]
    if "step" in extra:
        facts.append(("step", str(extra["step"])))
    facts_html = "".join(
        f'<span class="fact fact-{_css_token(k)}">{_e(k)} <b>{_e(v)}</b></span>' for k, v in facts
    )
    seat = (rec.get("info") or {}).get("seat")
    seat_html = f'<span class="badge seat">seat {_e(seat)}</span>' if seat else ""
    head = (
        f'<div class="card-head"><span class="ep">#{index}</span>'
        f'<span class="task">{_e(rec.get("task_id", "?"))}</span>'
        f'<span class="group">group {_e(rec.get("group_id", "?"))}</span>{seat_html}'
        f'<span class="badge status {st}">{_e(status)}</span>'
        f'<span class="reward-total">reward {_e(_fmt(rec.get("reward", 0.0)))}</span></div>'
    )
    messages = rec.get("messages") or []
    if decode is not None and ids:
        stream = (
            f'<details class="tokens" open><summary>Token stream ({len(ids)} tokens, '
            f'{num_sampled} sampled)</summary><div class="stream">'
            f"{_render_token_stream(rec, decode)}</div></details>"
        )
        msgs_open = ""
    else:
        stream = '<p class="note">Token view: pass a tokenizer (--tokenizer) to see tokens.</p>'
        msgs_open = " open"
    msgs = (
        f'<details class="messages"{msgs_open}><summary>Messages ({len(messages)})</summary>'
        + "".join(_render_message(m) for m in messages if isinstance(m, dict))
        + "</details>"
    )
    more = {k: v for k, v in (("info", rec.get("info")), ("extra", extra)) if v}
    more_html = (
        f'<details class="info"><summary>Info</summary><pre>'
        f"{_e(json.dumps(more, indent=2, ensure_ascii=False, default=str))}</pre></details>"
        if more
        else ""
    )
    return (
        f'<article class="card {st}" id="ep-{index}">{head}<div class="facts">{facts_html}</div>'
        f'<div class="panels">{_render_rewards(rec)}{_render_timings(rec)}</div>'
        f"{stream}{msgs}{more_html}</article>"
    )


def _side_by_side(recs: Sequence[dict[str, Any]], decode: Decode | None) -> list[str]:
    """The cards of `recs`; the seats of one multi-seat episode (`info["episode_id"]`) side
    by side in one row, where the episode's first seat appears."""
    rows: dict[Any, list[str]] = {}
    for i, rec in enumerate(recs):
        episode = (rec.get("info") or {}).get("episode_id")
        rows.setdefault(("episode", episode) if episode else ("card", i), []).append(
            _render_card(i, rec, decode)
        )
    return [
        f'<div class="seats">{"".join(cards)}</div>' if len(cards) > 1 else cards[0]
        for cards in rows.values()
    ]


def render_html(
    traces: Sequence[dict[str, Any] | Trajectory],
    decode: Decode | None = None,
    title: str = "forge-agent traces",
) -> str:
    """The whole page for `traces` (trace records from `read_traces`, or trajectories)."""
    recs = [trace_record(t) if isinstance(t, Trajectory) else t for t in traces]
    rewards = [float(r.get("reward", 0.0)) for r in recs]
    statuses = Counter(str(r.get("status", "?")) for r in recs)
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    status_text = ", ".join(f"{k} {v}" for k, v in statuses.most_common())
    legend = (
        '<div class="legend"><span><span class="tok tok-sampled">sampled</span> '
        "policy tokens (loss_mask 1, trained)</span>"
        '<span><span class="tok tok-prompt">prompt</span> initial prompt</span>'
        '<span><span class="tok tok-env">env</span> tool results, user turns, template</span>'
        "</div>"
    )
    cards = "\n".join(_side_by_side(recs, decode))
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<header class="page"><h1>{_e(title)}</h1><div class="summary">'
        f"<b>{len(recs)}</b> episodes \u00b7 mean reward <b>{_e(_fmt(mean))}</b> \u00b7 "
        f"{_e(status_text or 'no episodes')}</div>{legend}</header>\n"
        f"<main>\n{cards}\n</main></body></html>\n"
    )


def write_html(
    traces: Sequence[dict[str, Any] | Trajectory],
    path: str | Path,
    decode: Decode | None = None,
    title: str = "forge-agent traces",
) -> Path:
    """Render `traces` with `render_html` and write the page to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(traces, decode=decode, title=title), encoding="utf-8")
    return path


def byte_decode(ids: list[int]) -> str:
    """Decode ids as raw bytes (latin-1): the toy byte-level tokenizer used in tests and demos."""
    return bytes(i % 256 for i in ids).decode("latin-1")


def load_token_decoder(tokenizer: str | Path) -> Decode:
    """A per-token decoder from a tokenizer: "bytes", a `tokenizer.json` file, or a folder.

    A folder is loaded with transformers' `AutoTokenizer` (local files only); a `.json` file
    with the `tokenizers` library. Special tokens are kept, so chat-template markers show.
    """
    if str(tokenizer) == "bytes":
        return byte_decode
    path = Path(tokenizer)
    if path.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        return lambda ids: tok.decode(ids, skip_special_tokens=False)
    if path.is_dir():
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        return lambda ids: hf.decode(ids, skip_special_tokens=False)
    raise FileNotFoundError(
        f"tokenizer={str(tokenizer)!r}: expected 'bytes', a tokenizer.json file or a folder"
    )

"""The trace page in real headless Chromium: the rendered DOM and a screenshot.

Chromium comes from Debian's `chromium` package; the session fixture installs it with apt when
it is missing and skips (with apt's error) when it cannot.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from forge_agent.observability.trace_html import byte_decode, write_html
from forge_agent.types import Status, Trajectory

PROMPT = "<|im_start|>user\nCompute 6 * 7. <script>document.title='pwned'</script><|im_end|>\n"
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
TOOL = "<|im_end|>\n<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n"
ANSWER = "The answer is 42."
SAMPLED_RGB = (0xB8, 0xEC, 0xC6)  # --sampled in trace_html's CSS
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a chromium binary, installed through apt when missing."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and this machine has no apt-get to install it")
    steps = [
        ["apt-get", "install", "-y", "chromium"],
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "chromium"],
    ]
    proc = None
    for cmd in steps:  # install; on failure refresh the package lists once and retry
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=900,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        if cmd[1] == "install" and proc.returncode == 0:
            break
    found = shutil.which("chromium")
    if not found:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] if proc else []
        pytest.skip(
            f"chromium could not be installed: `apt-get install -y chromium` exited "
            f"{proc.returncode if proc else '?'}: {' '.join(detail)}"
        )
    return found


def _episode(task_id: str, status: Status, reward: float) -> Trajectory:
    traj = Trajectory(task_id=task_id, group_id="g0", status=status, reward=reward + 0.5)
    for kind, text in [("p", PROMPT), ("s", CALL), ("e", TOOL), ("s", ANSWER)]:
        ids = list(text.encode("latin-1"))
        start, sampled = len(traj.token_ids), kind == "s"
        traj.token_ids += ids
        traj.loss_mask += [int(sampled)] * len(ids)
        traj.logprobs += [-0.3 if sampled else 0.0] * len(ids)
        traj.versions += [2 if sampled else -1] * len(ids)
        if sampled:
            traj.turn_spans.append((start, len(traj.token_ids)))
    traj.messages = [
        {"role": "user", "content": "Compute 6 * 7. <script>document.title='pwned'</script>"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
                }
            ],
        },
        {"role": "tool", "content": "42", "tool_call_id": "call_0", "name": "calculator"},
        {"role": "assistant", "content": ANSWER},
    ]
    traj.reward_components = {"correct": reward, "format": 0.5}
    traj.timings = {"generate": 0.31, "env": 0.01}
    return traj


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    trajs = [
        _episode("calc-ok", Status.OK, 1.0),
        _episode("calc-truncated", Status.TRUNCATED_LENGTH, 0.0),
        _episode("calc-timeout", Status.ENV_TIMEOUT, 0.0),
    ]
    return write_html(trajs, tmp_path_factory.mktemp("page") / "traces.html", decode=byte_decode)


def _run_chromium(chromium: str, page: Path, tmp_path: Path, *args: str) -> str:
    cmd = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class DomSummary(HTMLParser):
    """What the tests need from Chromium's serialized DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cards: list[str] = []
        self.sampled_text = ""
        self.reward_rows: list[str] = []
        self._in_sampled = False
        self._in_breakdown = False
        self._cell: list[str] | None = None
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "article" and "card" in classes:
            self.cards.append(attrs.get("id", ""))
        self._in_sampled = tag == "span" and "tok-sampled" in classes and bool(self.cards)
        if tag == "table" and "reward-breakdown" in classes:
            self._in_breakdown = True
        if self._in_breakdown and tag == "tr":
            self._cell = []
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag == "span":
            self._in_sampled = False
        if tag == "table":
            self._in_breakdown = False
        if tag == "tr" and self._cell is not None:
            self.reward_rows.append(" ".join(self._cell))
            self._cell = None
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_sampled:
            self.sampled_text += data
        if self._cell is not None and data.strip():
            self._cell.append(data.strip())
        if self._in_title:
            self.title += data


def test_chromium_dom_has_one_card_per_episode_highlighted_sampled_tokens_and_rewards(
    chromium, page, tmp_path
):
    dom = DomSummary()
    dom.feed(_run_chromium(chromium, page, tmp_path, "--dump-dom"))

    assert dom.cards == ["ep-0", "ep-1", "ep-2"]
    assert dom.sampled_text == (CALL + ANSWER) * 3
    assert dom.reward_rows[:3] == ["correct 1", "format 0.5", "reward 1.5"]
    assert "script" not in dom.tags  # the episode's <script> stayed text
    assert dom.title == "forge-agent traces"  # and never ran


def test_chromium_screenshot_is_a_nonblank_page_showing_the_sampled_highlight(
    chromium, page, tmp_path
):
    from PIL import Image

    png = tmp_path / "shot.png"
    _run_chromium(chromium, page, tmp_path, f"--screenshot={png}", "--window-size=1280,1600")

    with Image.open(png) as img:
        rgb = img.convert("RGB")
        assert rgb.size == (1280, 1600)
        colors = rgb.getcolors(maxcolors=1 << 20)
    counts = {color: n for n, color in colors}
    white = counts.get((255, 255, 255), 0)
    assert len(counts) > 50, "the page has too few colours to hold text"
    assert white < 0.9 * 1280 * 1600, "the page is mostly blank"
    assert counts.get(SAMPLED_RGB, 0) > 2000, "sampled-token highlight not visible"

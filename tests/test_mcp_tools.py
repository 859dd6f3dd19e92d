"""Tools from real MCP servers (PyPI mcp-server-sqlite and mcp-server-time, npm
@modelcontextprotocol/server-filesystem), run inside the episode's bubblewrap sandbox and called
through the ToolSet."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from forge_agent.sandbox import Sandbox, make_sandbox
from forge_agent.toolkit.mcp import MCP_HOME, MCPConnection, MCPServerConfig, MCPStartError
from forge_agent.toolkit.toolset import ToolSet
from tests.mcp_servers import (
    DOCKER_BINDS,
    HANG_QUERY,
    filesystem_server,
    require_servers,
    sqlite_server,
    time_server,
)

try:
    from sandbox_fixtures import docker_engine
except ImportError:
    from tests.sandbox_fixtures import docker_engine  # noqa: F401


@pytest.fixture
def unused_tcp_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(name: str, **arguments: object) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def run(toolset: ToolSet, name: str, **arguments: object) -> str:
    return asyncio.run(toolset.call(call(name, **arguments)))["content"]


@pytest.fixture(scope="module")
def mcp_sandbox() -> Sandbox:
    require_servers()
    return make_sandbox("bwrap", ro_binds=[MCP_HOME])


@pytest.fixture
def session(mcp_sandbox: Sandbox) -> Iterator:
    with mcp_sandbox.session() as s:
        yield s


def connect(config: MCPServerConfig, session) -> MCPConnection:
    return MCPConnection(config, session).start()


# -- listing and calling ---------------------------------------------------------------------


def test_sqlite_server_tools_become_tool_specs_and_run_in_the_sandbox(session) -> None:
    conn = connect(sqlite_server(), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        assert {"read_query", "write_query", "create_table", "list_tables"} <= set(toolset.names)
        spec = next(s for s in toolset.specs if s["function"]["name"] == "read_query")
        assert spec["function"]["parameters"]["required"] == ["query"]
        assert spec["function"]["description"]
        run(toolset, "create_table", query="CREATE TABLE t (x INTEGER)")
        run(toolset, "write_query", query="INSERT INTO t VALUES (2), (40)")
        assert run(toolset, "read_query", query="SELECT sum(x) AS s FROM t") == "[{'s': 42}]"
        # the server's database file lives in the episode's workspace
        assert "test.db" in session.run(argv=["ls", "/workspace"]).stdout
        assert toolset.num_errors == 0 and toolset.num_calls == 3
    finally:
        conn.close()


def test_time_server_answers_through_the_toolset(session) -> None:
    conn = connect(time_server(), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        assert set(toolset.names) == {"get_current_time", "convert_time"}
        out = json.loads(run(toolset, "get_current_time", timezone="Asia/Tokyo"))
        assert out["timezone"] == "Asia/Tokyo" and out["datetime"].endswith("+09:00")
        converted = json.loads(
            run(
                toolset,
                "convert_time",
                source_timezone="Etc/UTC",
                time="12:00",
                target_timezone="Asia/Kolkata",
            )
        )
        assert converted["target"]["datetime"][11:16] == "17:30"
    finally:
        conn.close()


def test_bad_calls_are_error_messages_with_counted_kinds(session) -> None:
    conn = connect(
        filesystem_server(tools=("read_text_file", "list_directory"), prefix="fs_"), session
    )
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        assert toolset.names == ["fs_read_text_file", "fs_list_directory"]
        assert run(toolset, "fs_write_file", path="x").startswith("Error: unknown tool")
        bad = run(toolset, "fs_read_text_file", pth="/workspace/x")
        assert bad.startswith("Error: bad arguments for 'fs_read_text_file'")
        assert "missing required argument 'path'" in bad
        wrong_type = run(toolset, "fs_read_text_file", path=3)
        assert "argument 'path' must be a string, got integer 3" in wrong_type
        # the server's own refusal (a result flagged isError) is a server error
        refused = run(toolset, "fs_read_text_file", path="/etc/passwd")
        assert refused.startswith("Error: tool 'fs_read_text_file' failed: Access denied")
        assert toolset.error_counts == {
            "unknown_tool": 1,
            "bad_arguments": 2,
            "mcp_server_error": 1,
        }
        assert conn.error_counts["mcp_server_error"] == 1
    finally:
        conn.close()


def test_long_output_is_cut_like_a_python_tools(session) -> None:
    conn = connect(sqlite_server(), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10, max_output_chars=100)
        out = run(toolset, "read_query", query="SELECT hex(zeroblob(500)) AS z")
        assert out.startswith("[{'z': '0000") and "...[truncated" in out
        assert toolset.error_counts["output_truncated"] == 1
    finally:
        conn.close()


# -- confinement -----------------------------------------------------------------------------


def test_filesystem_server_cannot_reach_outside_the_workspace(session, tmp_path, monkeypatch):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET")
    os.chmod(tmp_path, 0o755)
    monkeypatch.setenv("FORGE_TEST_SECRET", "env-secret-value")
    # The server is told it may read everything ("/"): only the sandbox stands in the way.
    conn = connect(filesystem_server("/"), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        session.write_file("notes.txt", "inside")
        assert run(toolset, "read_text_file", path="/workspace/notes.txt") == "inside"
        for path in (str(secret), "/etc/shadow", "/root/.bashrc", os.path.abspath(__file__)):
            out = run(toolset, "read_text_file", path=path)
            assert out.startswith("Error:") and "ENOENT" in out, (path, out)
        environ = run(toolset, "read_text_file", path="/proc/1/environ")
        assert "env-secret-value" not in environ
        # no network: the server's network namespace holds only a loopback device
        devices = run(toolset, "read_text_file", path="/proc/net/dev").splitlines()[2:]
        assert [d.split(":")[0].strip() for d in devices] == ["lo"]
        out = run(toolset, "write_file", path="/usr/planted.txt", content="x")
        assert out.startswith("Error:") and "EROFS" in out
        assert not os.path.exists("/usr/planted.txt")
        assert run(toolset, "write_file", path="/workspace/out.txt", content="ok").startswith(
            "Successfully"
        )
        assert session.read_file("out.txt") == "ok"
    finally:
        conn.close()


def test_server_dies_with_the_sandbox_session(mcp_sandbox) -> None:
    session = mcp_sandbox.session()
    conn = connect(sqlite_server(), session)
    proc = conn._proc
    assert proc is not None and proc.poll() is None
    session.close()
    assert proc.wait(timeout=5) is not None
    toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
    out = run(toolset, "list_tables")
    assert out.startswith("Error: tool 'list_tables' failed: MCP server 'sqlite'")
    conn.close()


# -- failures --------------------------------------------------------------------------------


def test_hung_server_is_a_timeout_error_and_a_fresh_server_answers_next(session) -> None:
    conn = connect(sqlite_server(), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=2)
        start = time.monotonic()
        out = run(toolset, "read_query", query=HANG_QUERY)
        assert time.monotonic() - start < 3
        assert out == "Error: tool 'read_query' timed out after 2 s"
        assert conn.error_counts["mcp_server_hang"] == 1
        toolset.timeout_s = 20  # room for the restart on this busy machine
        assert run(toolset, "read_query", query="SELECT 7 AS x") == "[{'x': 7}]"
        assert conn.restarts == 1
    finally:
        conn.close()


def test_server_crash_during_a_call_is_a_tool_error(session) -> None:
    conn = connect(sqlite_server(), session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        killer = threading.Timer(0.5, conn._proc.kill)
        killer.start()
        start = time.monotonic()
        out = run(toolset, "read_query", query=HANG_QUERY)
        assert time.monotonic() - start < 5
        assert out.startswith("Error: tool 'read_query' failed: MCP server 'sqlite'")
        assert "crashed during the call" in out and "exit status -9" in out
        assert toolset.error_counts["mcp_server_crash"] == 1
    finally:
        conn.close()


def test_restarts_are_bounded(session) -> None:
    conn = connect(sqlite_server(max_restarts=0), session)
    try:
        conn._proc.kill()
        conn._proc.wait()
        toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
        out = run(toolset, "list_tables")
        assert "is down" in out and "restarted 0 times already" in out
        assert toolset.error_counts["mcp_server_crash"] == 1
    finally:
        conn.close()


def test_server_that_cannot_start_names_itself(session) -> None:
    config = MCPServerConfig("broken", command=("/usr/bin/python3", "-c", "raise SystemExit(3)"))
    with pytest.raises(MCPStartError, match=r"MCP server 'broken' \(/usr/bin/python3 .*exit"):
        connect(config, session)


def test_stdio_server_needs_a_sandbox_session() -> None:
    with pytest.raises(ValueError, match="'sqlite' is a stdio server: it needs the episode's"):
        MCPConnection(sqlite_server(), None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give exactly one of command="),
        ({"command": ("x",), "url": "http://h/mcp"}, "give exactly one of command="),
        ({"url": "ftp://h"}, "url must start with http"),
        ({"command": ("x",), "start_timeout_s": 0}, "start_timeout_s must be positive"),
    ],
)
def test_server_config_errors_name_the_server(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        MCPServerConfig("srv", **kwargs)
    assert "'srv'" in str(info.value)


# -- a streamable-HTTP server ----------------------------------------------------------------


def test_http_server_tools_are_reached_by_url(unused_tcp_port: int) -> None:
    """PyPI's mcp-server-calculator (a FastMCP app) served over streamable HTTP on the host."""
    require_servers()
    serve = (
        "from mcp_server_calculator.calculator import mcp\n"
        f"mcp.settings.port = {unused_tcp_port}\n"
        "mcp.run(transport='streamable-http')\n"
    )
    server = subprocess.Popen(
        [f"{MCP_HOME}/bin/python", "-c", serve],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = connect(MCPServerConfig("calc", url=url, start_timeout_s=5), None)
                break
            except MCPStartError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        try:
            toolset = ToolSet(conn.tools(), timeout_s=10)
            assert toolset.names == ["calculate"]
            assert run(toolset, "calculate", expression="6 * 7") == "42"
            assert run(toolset, "calculate").startswith("Error: bad arguments")
        finally:
            conn.close()
    finally:
        server.kill()
        server.wait()


# -- the Docker backend ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_session(docker_engine: str) -> Iterator:
    require_servers()
    sandbox = make_sandbox("docker", base_url=docker_engine, ro_binds=DOCKER_BINDS)
    with sandbox.session() as s:
        yield s


def test_docker_sqlite_and_time_servers_answer_through_the_toolset(docker_session) -> None:
    sqlite = connect(sqlite_server(), docker_session)
    clock = connect(time_server(), docker_session)
    try:
        toolset = ToolSet(sqlite.tools() + clock.tools(), sandbox=docker_session, timeout_s=20)
        run(toolset, "create_table", query="CREATE TABLE t (x INTEGER)")
        run(toolset, "write_query", query="INSERT INTO t VALUES (5), (6)")
        assert run(toolset, "read_query", query="SELECT sum(x) AS s FROM t") == "[{'s': 11}]"
        assert "test.db" in docker_session.run(argv=["ls", "/workspace"]).stdout
        now = json.loads(run(toolset, "get_current_time", timezone="Asia/Tokyo"))
        assert now["datetime"].endswith("+09:00")
        assert toolset.num_errors == 0
    finally:
        sqlite.close()
        clock.close()


def test_docker_filesystem_server_cannot_reach_outside_the_workspace(docker_session, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET")
    conn = connect(filesystem_server("/"), docker_session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=docker_session, timeout_s=20)
        docker_session.write_file("notes.txt", "inside")
        assert run(toolset, "read_text_file", path="/workspace/notes.txt") == "inside"
        for path in (str(secret), "/etc/shadow", "/root/.bashrc"):
            out = run(toolset, "read_text_file", path=path)
            assert out.startswith("Error:") and "ENOENT" in out, (path, out)
        out = run(toolset, "write_file", path=f"{MCP_HOME}/planted.txt", content="x")
        assert out.startswith("Error:") and "EROFS" in out
    finally:
        conn.close()


def test_docker_hung_server_is_a_timeout_error(docker_session) -> None:
    conn = connect(sqlite_server(db="/workspace/hang.db"), docker_session)
    try:
        toolset = ToolSet(conn.tools(), sandbox=docker_session, timeout_s=3)
        container = conn._proc.container
        start = time.monotonic()
        assert run(toolset, "read_query", query=HANG_QUERY) == (
            "Error: tool 'read_query' timed out after 3 s"
        )
        assert time.monotonic() - start < 5
        with pytest.raises(Exception, match=r"No such container|404"):  # the hung one is gone
            container.reload()
    finally:
        conn.close()

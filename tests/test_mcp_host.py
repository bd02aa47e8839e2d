"""``tool-hub mcp``: an app's tools as an MCP server, tested with the official ``mcp`` client over stdio (the
command started as ``python -m chatgpt_tool_hub.cli mcp``) and streamable HTTP on 127.0.0.1, and the tool host
underneath in-process: names and schemas, calls through dispatch (secrets redacted, output truncated), dangerous
tools left out without the opt-in, unknown tools an MCP error, files written named in the result.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from chatgpt_tool_hub.cli import main  # noqa: E402
from chatgpt_tool_hub.server.mcp_host import ToolHost, UnknownTool  # noqa: E402
from chatgpt_tool_hub.server.mcp_serve import http_app  # noqa: E402
from chatgpt_tool_hub.tools import tool  # noqa: E402

SECRET = "sk-test-secret-0123456789abcdef"
REPO = Path(__file__).resolve().parents[1]


@tool(name="shout", description="Say the text loudly.")
def shout(text: str, times: int = 1) -> str:
    """Upper-case ``text``, ``times`` times."""
    return " ".join([text.upper()] * times)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(REPO),
            "LLM_API_KEY": SECRET, "WORKSPACE_DIR": str(tmp_path / "ws"), "OBSERVATION_MAX_CHARS": "300", **extra}


def _text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


# ---- the tool host, in-process ---------------------------------------------------------------------------


@pytest.fixture
def host(tmp_path):
    made = ToolHost.build([shout, "write-file"], no_default=True, llm_api_key=SECRET, workspace_dir=str(tmp_path),
                          observation_max_chars=200)
    yield made
    made.close()


def test_the_host_lists_safe_tools_with_their_schemas_and_leaves_dangerous_ones_out(host):
    listed = {item["name"]: item for item in host.listing()}
    assert list(listed) == ["shout"] and host.left_out == ["write-file"]
    schema = listed["shout"]["input_schema"]
    assert schema["properties"]["text"]["type"] == "string" and schema["required"] == ["text"]
    assert listed["shout"]["description"].startswith("Say the text loudly")
    assert "write-file" in host.summary() and "--allow-dangerous" in host.summary()


def test_a_call_goes_through_dispatch_redacted_and_truncated(host):
    assert host.call("shout", {"text": "hi", "times": 2}).text == "HI HI"
    redacted = host.call("shout", {"text": SECRET.lower()})
    assert SECRET.upper() not in redacted.text and "***" in redacted.text
    long = host.call("shout", {"text": "x" * 1000})
    assert len(long.text) < 300 and "characters omitted" in long.text
    bad = host.call("shout", {"times": 2})  # the schema wants text: an error result, not a crash
    assert bad.is_error and "text" in bad.text


def test_a_dangerous_or_unknown_tool_is_refused_with_a_reason(host):
    with pytest.raises(UnknownTool, match="--allow-dangerous"):
        host.call("write-file", {"path": "a.txt", "content": "x"})
    with pytest.raises(UnknownTool, match="no tool named 'nope'.*shout"):
        host.call("nope", {})


def test_with_the_opt_in_a_dangerous_tool_runs_and_the_file_it_wrote_is_named(tmp_path):
    host = ToolHost.build(["write-file"], no_default=True, workspace_dir=str(tmp_path), allow_dangerous=True)
    try:
        assert [item["name"] for item in host.listing()] == ["write-file"] and host.listing()[0]["dangerous"]
        result = host.call("write-file", {"path": "notes/a.txt", "content": "hello"})
        assert not result.is_error
        assert result.files == [tmp_path.resolve() / "notes" / "a.txt"]
        assert str(tmp_path.resolve() / "notes" / "a.txt") in result.text
    finally:
        host.close()


# ---- over stdio ------------------------------------------------------------------------------------------


async def _stdio_session(tmp_path: Path, check, args: list[str], env: dict[str, str]) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "chatgpt_tool_hub.cli", "mcp", *args],
                                   env=_env(tmp_path, **env), cwd=str(tmp_path))
    with anyio.fail_after(120):
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await check(session)


def test_over_stdio_a_host_lists_calls_and_is_refused_what_it_should_be(tmp_path):
    async def check(session: ClientSession) -> None:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(listed) == {"python", "list-dir"}  # write-file is dangerous: not listed without the opt-in
        assert listed["list-dir"].input_schema["properties"]["path"]["type"] == "string"
        assert listed["python"].input_schema["type"] == "object"
        result = await session.call_tool("python", {"input": "print(6 * 7)"})
        assert not result.is_error and _text(result).strip() == "42"
        secret = await session.call_tool("python", {"input": f"print({SECRET[:8]!r} + {SECRET[8:]!r})"})
        assert SECRET not in _text(secret) and "***" in _text(secret)
        long = await session.call_tool("python", {"input": "print('y' * 5000)"})
        assert len(_text(long)) < 600 and "characters omitted" in _text(long)
        with pytest.raises(MCPError, match="no tool named 'nope'"):
            await session.call_tool("nope", {})
        with pytest.raises(MCPError, match="--allow-dangerous"):
            await session.call_tool("write-file", {"path": "a.txt", "content": "x"})
        assert not (tmp_path / "ws" / "a.txt").exists()

    anyio.run(_stdio_session, tmp_path, check, ["--tools", "python,list-dir,write-file"], {"NO_DEFAULT": "true"})


# ---- over streamable HTTP ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_over_streamable_http_with_the_opt_in_a_dangerous_tool_writes_and_names_its_file(tmp_path):
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "chatgpt_tool_hub.cli", "mcp", "--http", "--port", str(port),
                                 "--tools", "write-file", "--allow-dangerous"], cwd=tmp_path,
                                env=_env(tmp_path, NO_DEFAULT="true"), stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"tool-hub mcp --http did not start:\n{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.1)

        async def check() -> None:
            with anyio.fail_after(60):
                async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
                    async with ClientSession(streams[0], streams[1]) as session:
                        await session.initialize()
                        listed = (await session.list_tools()).tools
                        assert [t.name for t in listed] == ["write-file"]
                        assert listed[0].annotations is not None and listed[0].annotations.destructive_hint
                        result = await session.call_tool("write-file", {"path": "out.txt", "content": "made"})
                        assert not result.is_error
                        written = (tmp_path / "ws" / "out.txt").resolve()
                        assert written.read_text() == "made" and str(written) in _text(result)

        anyio.run(check)
        assert b"Dangerous tools are offered" in log.read_bytes()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_bearer_key_guards_the_http_endpoint():
    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["path"])

    class _Server:
        def streamable_http_app(self, host):
            return inner

    app = http_app(_Server(), api_key="k-1")

    async def request(headers):
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b""}

        await app({"type": "http", "path": "/mcp", "headers": headers}, receive, send)
        return sent[0]["status"] if sent else 200

    assert anyio.run(request, [(b"authorization", b"Bearer wrong")]) == 401
    assert anyio.run(request, []) == 401
    assert anyio.run(request, [(b"authorization", b"Bearer k-1")]) == 200 and calls == ["/mcp"]


# ---- the command's own errors ------------------------------------------------------------------------------


def test_without_the_mcp_extra_the_command_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    assert main(["mcp"]) == 2
    assert 'pip install "chatgpt-tool-hub[mcp]"' in capsys.readouterr().err


def test_http_on_a_public_address_without_a_key_is_refused(capsys):
    assert main(["mcp", "--http", "--host", "0.0.0.0", "--tools", "python"]) == 2
    err = capsys.readouterr().err
    assert "MCP_HOST_API_KEY" in err and "0.0.0.0" in err


def test_an_unknown_tool_name_is_a_configuration_error(capsys, monkeypatch):
    hardened = []
    monkeypatch.setattr("chatgpt_tool_hub.runtime.hardening.harden_server_process", lambda: hardened.append(1))
    assert main(["mcp", "--tools", "pythn"]) == 2
    assert hardened == [1]  # the command hardens its process before it builds the tools (not this test's)
    assert "did you mean 'python'" in capsys.readouterr().err

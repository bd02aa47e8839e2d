"""The tool-hub command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatgpt_tool_hub import cli

from helpers import act, answer


@pytest.fixture
def server_env(chat_server, monkeypatch):
    monkeypatch.setenv("LLM_API_BASE_URL", chat_server.url)
    monkeypatch.setenv("MAX_RETRIES", "0")
    monkeypatch.setenv("PYTHON_TIMEOUT", "10")
    return chat_server


def test_ask_prints_only_the_answer(server_env, capsys):
    server_env.replies = [act("python", "print(40 + 2)"), answer("It is 42.")]
    assert cli.main(["ask", "what", "is", "40+2?"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "It is 42."
    assert server_env.bodies[0]["messages"][-1]["content"] == "what is 40+2?"
    assert server_env.bodies[0]["stream"] is True


def test_ask_verbose_shows_the_inner_monologue(server_env, capsys):
    server_env.replies = [act("python", "print(40 + 2)"), answer("It is 42.")]
    assert cli.main(["ask", "-v", "40+2?"]) == 0
    out = capsys.readouterr().out
    for part in ("Thought", "Action", "Observation (python)", "42", "It is 42."):
        assert part in out


def test_no_llm_configured_explains_and_exits_non_zero(capsys):
    assert cli.main(["ask", "hello"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "No LLM is configured" in err and "LLM_API_KEY" in err and "local:" in err


def test_run_tool_in_pure_mode(capsys):
    assert cli.main(["run", "python", "print(sum(range(10)))"]) == 0
    assert capsys.readouterr().out.strip() == "45"


def test_run_unknown_tool(capsys):
    assert cli.main(["run", "nope", "x"]) == cli.EXIT_CONFIG
    assert "unknown tool 'nope'" in capsys.readouterr().err


def test_tools_lists_names_and_keys(capsys):
    assert cli.main(["tools"]) == 0
    out = capsys.readouterr().out
    assert "python" in out and "keys it needs" in out


def test_demo_is_labelled_and_uses_the_real_tool(capsys, tmp_path):
    assert cli.main(["demo", "--workspace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "OFFLINE DEMO" in out and "scripted controller" in out
    assert "1229" in out and "5736396" in out
    assert (tmp_path / "primes_summary.txt").read_text() == "primes below 10000: 1229, sum 5736396\n"


def test_repl_commands_and_history(server_env, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    lines = iter(["/help", "/tools", "/depth 1", "/depth x", "hello", "again", "/reset", "fresh",
                  "/model other-model", "/bogus", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    server_env.replies = [answer("hi!"), answer("still here"), answer("new start")]
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for part in ("/depth N", "python", "think depth is now 1", "usage: /depth N", "hi!", "still here",
                 "conversation forgotten", "new start", "model is now other-model", "unknown command /bogus"):
        assert part in out, part
    second = [m["content"] for m in server_env.bodies[1]["messages"][1:]]
    assert second == ["hello", "hi!", "again"]
    third = [m["content"] for m in server_env.bodies[2]["messages"][1:]]
    assert third == ["fresh"]


def test_repl_ends_on_eof(server_env, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))

    def eof(prompt=""):
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    assert cli.main([]) == 0


TOOL_HUB = Path(sys.executable).parent / "tool-hub"


@pytest.fixture
def tool_hub():
    """Run the installed ``tool-hub`` console script (what ``pip install`` put next to this Python)."""
    if not TOOL_HUB.is_file():
        pytest.skip(f"the tool-hub console script is not installed next to {sys.executable}; "
                    f"run pip install -e . first")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(TOOL_HUB), *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "200"})

    return run


def test_console_script_is_installed(tool_hub, tmp_path):
    from chatgpt_tool_hub import __version__

    version = tool_hub("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"chatgpt_tool_hub {__version__}"), version.stderr

    listing = tool_hub("tools")
    assert listing.returncode == 0, listing.stderr
    assert "keys it needs" in listing.stdout
    for name in ("python", "terminal", "read-file", "write-file", "list-dir", "url-get"):
        assert f" {name} " in listing.stdout, name

    demo = tool_hub("demo", "--workspace", str(tmp_path / "ws"))
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "OFFLINE DEMO" in demo.stdout and "1229" in demo.stdout and "5736396" in demo.stdout
    assert (tmp_path / "ws" / "primes_summary.txt").read_text() == "primes below 10000: 1229, sum 5736396\n"

    unknown = tool_hub("run", "nope", "x")
    assert unknown.returncode == cli.EXIT_CONFIG and "unknown tool 'nope'" in unknown.stderr


def test_repl_image_command_and_ask_with_file(server_env, capsys, monkeypatch, tmp_path):
    from PIL import Image

    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    monkeypatch.setenv("WORKSPACE_DIR", str(tmp_path / "ws"))
    picture = tmp_path / "p.png"
    Image.new("RGB", (40, 20)).save(picture)
    lines = iter([f"/image {picture}", "/image /no/such/file.png", "what is it?", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    server_env.replies = [answer("a picture"), answer("also a picture")]
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "received: saved as image/" in out and "cannot use that file" in out
    assert "image/" in server_env.bodies[0]["messages"][-3]["content"]
    assert cli.main(["ask", "--file", str(picture), "and", "now?"]) == 0
    assert "image/" in server_env.bodies[1]["messages"][-3]["content"]


def test_terminal_asks_before_a_dangerous_tool(server_env, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    monkeypatch.setenv("WORKSPACE_DIR", str(tmp_path / "ws"))
    answers = iter(["run it", "n", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    server_env.replies = [act("terminal", "touch made-by-terminal"), answer("I was not allowed.")]
    assert cli.main(["--tools", "terminal"]) == 0
    out = capsys.readouterr().out
    assert "terminal wants to run with this input" in out and "I was not allowed." in out
    assert not (tmp_path / "ws" / "made-by-terminal").exists()
    assert "did not approve" in server_env.bodies[1]["messages"][-1]["content"]

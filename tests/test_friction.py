"""What a new user ran into, each fixed: the approval prompt without a terminal, empty replies, pure-mode file
messages, plugins at ``tool-hub tools`` / ``run``, the workspace made too early, dangerous tools without an
approver, command-line details, ``@tool`` defaults, an unused bad setting, the Pillow-only extra, doc snippets."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chatgpt_tool_hub import cli
from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool

from helpers import act, answer

ROOT = Path(__file__).resolve().parents[1]
TOOL_HUB = Path(sys.executable).parent / "tool-hub"
MCP_SERVER = str(Path(__file__).parent / "fixtures" / "mcp_server.py")


@pytest.fixture
def server_env(chat_server, monkeypatch):
    monkeypatch.setenv("LLM_API_BASE_URL", chat_server.url)
    monkeypatch.setenv("MAX_RETRIES", "0")
    monkeypatch.setenv("PYTHON_TIMEOUT", "10")
    return chat_server


def tool_hub(*args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess:
    """The installed console script, with this source tree first on the path."""
    if not TOOL_HUB.is_file():
        pytest.skip(f"the tool-hub console script is not installed next to {sys.executable}")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([str(TOOL_HUB), *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": path, **env})


# ---- the approval prompt when stdin is not a terminal ------------------------------------------------------


@pytest.mark.parametrize("argv, stdin", [(["ask", "run", "it"], ""), ([], "run it\n")])
def test_approval_without_a_terminal_refuses_without_a_traceback(chat_server, tmp_path, argv, stdin):
    chat_server.replies = [act("terminal", "touch made-by-terminal"), answer("I was not allowed.")]
    proc = tool_hub("--tools", "terminal", *argv, stdin=stdin, LLM_API_BASE_URL=chat_server.url, MAX_RETRIES="0",
                    WORKSPACE_DIR=str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "EOFError" not in proc.stderr, proc.stderr
    assert "no answer on stdin: not allowed" in proc.stdout
    assert "I was not allowed." in proc.stdout
    assert "did not approve" in chat_server.bodies[1]["messages"][-1]["content"]
    assert not (tmp_path / "ws" / "made-by-terminal").exists()


# ---- an empty reply ----------------------------------------------------------------------------------------


def test_an_empty_reply_names_the_setting_and_exits_non_zero(server_env, capsys):
    server_env.replies = ["", "", "", ""]
    assert cli.main(["ask", "hello"]) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out.strip() == ""
    assert "the model sent back empty replies" in captured.err
    assert "MODEL_NAME" in captured.err and "gpt-4o-mini" in captured.err and server_env.url in captured.err
    assert captured.err.count("streamed no text") <= 1, captured.err  # once, as a warning line, not raw and thrice


def test_an_empty_reply_in_the_terminal_is_not_remembered(server_env, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    lines = iter(["hello", "again", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    server_env.replies = ["", "", "", answer("here now")]
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "the model sent back empty replies" in out and "here now" in out
    assert [m["content"] for m in server_env.bodies[-1]["messages"][1:]] == ["again"]


# ---- pure mode and files -----------------------------------------------------------------------------------


def test_run_takes_a_path_in_the_current_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
    assert cli.main(["run", "read-file", "notes.txt"]) == 0
    assert capsys.readouterr().out.strip() == "remember the milk"
    assert cli.main(["run", "python", "print(open('notes.txt').read().upper())"]) == 0
    assert capsys.readouterr().out.strip() == "REMEMBER THE MILK"
    assert not (tmp_path / "workspace").exists()


@pytest.mark.parametrize("argv", [["run", "read-file", "missing.txt"], ["run", "image-captioning", "missing.png"]])
def test_pure_mode_file_errors_speak_to_a_person(tmp_path, capsys, argv):
    assert cli.main(argv) in (cli.EXIT_ERROR, cli.EXIT_USAGE)
    err = " ".join(capsys.readouterr().err.split())
    assert "missing." in err and str(tmp_path) in err and "WORKSPACE_DIR" in err, err
    assert "earlier observation" not in err and "never invent" not in err, err


def test_run_uses_workspace_dir_when_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKSPACE_DIR", str(tmp_path / "ws"))
    (tmp_path / "notes.txt").write_text("here", encoding="utf-8")
    assert cli.main(["run", "read-file", "notes.txt"]) == cli.EXIT_ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert str(tmp_path / "ws") in err and "WORKSPACE_DIR" in err, err


# ---- plugins from .env at `tool-hub tools` and `tool-hub run` ------------------------------------------------

_SPEC = {
    "openapi": "3.0.0",
    "info": {"title": "clock", "version": "1"},
    "paths": {"/now": {"get": {"operationId": "whatTime", "summary": "The time on the test clock.",
                               "responses": {"200": {"description": "ok"}}}}},
}


class _Clock(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({**_SPEC, "servers": [{"url": f"http://127.0.0.1:{self.server.server_address[1]}"}]}) \
            if self.path == "/openapi.json" else json.dumps({"time": "12:34"})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def clock():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Clock)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_openapi_plugins_in_dotenv_reach_tools_and_run(clock, tmp_path, capsys):
    entry = [{"source": f"{clock}/openapi.json", "allow_private": True}]
    (tmp_path / ".env").write_text(f"OPENAPI_PLUGINS={json.dumps(entry)}\n", encoding="utf-8")
    assert cli.main(["tools"]) == 0
    out = capsys.readouterr().out
    assert "whatTime" in out and "OPENAPI_PLUGINS" in out
    assert cli.main(["run", "clock-whatTime", "{}"]) == 0
    assert "12:34" in capsys.readouterr().out


def test_mcp_servers_in_dotenv_reach_tools_and_run(tmp_path, capsys):
    pytest.importorskip("mcp")
    entry = [{"server": [sys.executable, MCP_SERVER], "timeout": 30}]
    (tmp_path / ".env").write_text(f"MCP_SERVERS={json.dumps(entry)}\n", encoding="utf-8")
    assert cli.main(["tools"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\badd\b", out) and "MCP_SERVERS" in out
    assert cli.main(["run", "add", '{"a": 2, "b": 40}']) == 0
    assert "42" in capsys.readouterr().out


# ---- the workspace folder ----------------------------------------------------------------------------------


def test_a_failing_create_app_leaves_no_workspace(tmp_path):
    with pytest.raises(ConfigError):
        AppFactory().create_app(tools_list=["python", "terminal", "write-file", "list-dir"])  # no LLM configured
    assert not (tmp_path / "workspace").exists()


def test_the_workspace_is_made_on_first_use(tmp_path):
    llm = ScriptedLLM([act("write-file", '{"path": "a.txt", "content": "x"}'), answer("done")])
    app = AppFactory().create_app(tools_list=["python", "terminal", "write-file"], llm=llm, no_default=True,
                                  approve=lambda name, tool_input: True)
    try:
        assert not (tmp_path / "workspace").exists()
        assert app.ask("write it") == "done"
        assert (tmp_path / "workspace" / "a.txt").read_text() == "x"
    finally:
        app.close()


def test_a_refused_path_makes_no_folder_and_a_tool_built_alone_makes_it_at_once(tmp_path):
    from chatgpt_tool_hub.tools.builtin.files import ReadFileTool

    llm = ScriptedLLM([act("read-file", "/etc/passwd"), act("list-dir", "../x"), answer("refused")])
    app = AppFactory().create_app(tools_list=["read-file", "list-dir"], llm=llm, no_default=True,
                                  workspace_dir=str(tmp_path / "app-ws"))
    try:
        result = app.run("read it")
    finally:
        app.close()
    assert [s.status for s in result.steps] == ["error", "error"]
    assert not (tmp_path / "app-ws").exists()
    ReadFileTool(workspace_dir=tmp_path / "alone").close()  # built alone: its folder, as before
    assert (tmp_path / "alone").is_dir()


# ---- dangerous tools without an approver -------------------------------------------------------------------


def test_dangerous_tools_without_an_approver_warn_once_per_app():
    with pytest.warns(UserWarning) as caught:
        app = AppFactory().create_app(tools_list=["terminal", "write-file", "python"], llm=ScriptedLLM([]),
                                      no_default=True)
    app.close()
    mine = [w for w in caught if "approve" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    message = str(mine[0].message)
    assert "terminal" in message and "write-file" in message and "python" not in message
    assert "without asking" in message and "create_app(approve=" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AppFactory().create_app(tools_list=["terminal"], llm=ScriptedLLM([]), no_default=True,
                                approve=lambda name, tool_input: False).close()
        AppFactory().create_app(tools_list=["python"], llm=ScriptedLLM([]), no_default=True).close()


def test_the_readme_states_the_real_rule():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "without an approver they run" in text


# ---- the command line --------------------------------------------------------------------------------------


def test_help_says_a_bare_tool_hub_opens_the_terminal(capsys):
    assert cli.main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Without a command, tool-hub opens the LLM-OS terminal" in out


def test_global_options_after_the_command(server_env, capsys):
    args = cli.build_parser().parse_args(["ask", "--depth", "5", "--model", "m2", "--tools", "terminal", "hi"])
    assert (args.depth, args.model, args.tools) == (5, "m2", "terminal")
    args = cli.build_parser().parse_args(["--depth", "4", "ask", "hi"])
    assert args.depth == 4  # before the command still works, and is not reset by the sub-command
    server_env.replies = [answer("fine")]
    assert cli.main(["ask", "hi", "--depth", "5", "--model", "other-model"]) == 0
    assert capsys.readouterr().out.strip() == "fine"
    assert server_env.bodies[0]["model"] == "other-model"


@pytest.mark.parametrize("argv", [["bogus"], ["ask"], ["ask", "  "], ["run"], ["ask", "--depth", "x", "hi"]])
def test_usage_errors_exit_2_and_never_raise(argv, capsys, monkeypatch):
    monkeypatch.setenv("LLM_API_BASE_URL", "http://127.0.0.1:9/v1")  # an LLM is configured (and never called)
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip()


def test_unknown_names_show_invisible_characters_and_still_find_the_tool(server_env, capsys):
    assert cli.main(["run", "py\u200bthon", "x"]) == 2
    err = capsys.readouterr().err
    assert "unknown tool 'py\\u200bthon'; did you mean 'python'?" in err and "\u200b" not in err
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.errors import ConfigError
    from chatgpt_tool_hub.testing import ScriptedLLM

    with pytest.raises(ConfigError, match="'ｐｙｔｈｏｎ': did you mean 'python'\\?"):  # full-width letters
        AppFactory().create_app(tools_list=["ｐｙｔｈｏｎ"], llm=ScriptedLLM([]), no_default=True)


@pytest.mark.parametrize("name", ["  ", " padded", "a\u200bb", "bell\x07"])
def test_a_tool_name_the_model_cannot_write_is_refused(name):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.errors import ConfigError
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools import tool

    made = tool(name=name, description="d")(lambda text: "x")
    with pytest.raises(ConfigError, match="a name the model cannot call"):
        AppFactory().create_app(tools_list=[made], llm=ScriptedLLM([]), no_default=True)


def test_did_you_mean_for_unknown_tools(server_env, capsys):
    assert cli.main(["run", "pyhton", "print(1)"]) == 2
    err = capsys.readouterr().err
    assert "unknown tool 'pyhton'" in err and "did you mean 'python'?" in err and "tool-hub tools" in err
    assert cli.main(["--tools", "termnal", "ask", "hi"]) == 2
    assert "did you mean 'terminal'" in capsys.readouterr().err
    assert server_env.bodies == []  # refused before the LLM was called


def test_session_tools_table_has_no_default_column_and_cuts_with_an_ellipsis(server_env, capsys, monkeypatch,
                                                                             tmp_path):
    @tool(name="wordy", description=" ".join(["a long description"] * 40))
    def wordy(text: str) -> str:
        return text

    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    real = cli._create_app
    monkeypatch.setattr(cli, "_create_app", lambda args, console, **extra: _with(real(args, console), wordy))
    lines = iter(["/tools", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    monkeypatch.setenv("COLUMNS", "300")
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "default" not in out and "asks first" in out
    row = next(line for line in out.splitlines() if line.startswith("│ wordy"))
    assert re.search(r"\b(a|long|description)…", row), row  # cut after a whole word


def _with(app, extra_tool):
    app.add_tool(extra_tool)
    return app


def test_long_error_lines_wrap_at_words(monkeypatch, capsys):
    from rich.console import Console

    monkeypatch.setattr(cli, "make_console", lambda stderr=False: Console(stderr=stderr, width=50, force_terminal=True,
                                                                           color_system=None, highlight=False))
    assert cli.main(["run", "bing-search", "x"]) == cli.EXIT_CONFIG
    lines = capsys.readouterr().err.rstrip("\n").split("\n")
    assert len(lines) > 2 and all(len(line) <= 50 for line in lines)
    joined = " ".join(line.strip() for line in lines)
    assert "needs bing_subscription_key: pass it to create_app (bing_subscription_key=...)" in joined


# ---- @tool defaults ----------------------------------------------------------------------------------------


def test_a_tool_parameter_default_is_used_without_input():
    @tool
    def greet(name: str = "world") -> str:
        return f"hello {name}"

    @tool
    def add(a: int = 1, b: int = 2) -> int:
        return a + b

    @tool
    def shout(text: str) -> str:
        return text.upper() or "(nothing)"

    for empty in ("", "   ", None, {}):
        assert greet.run(empty) == "hello world"
        assert add.run(empty) == "3"
    assert greet.run("you") == "hello you" and add.run('{"b": 5}') == "6"
    assert shout.run("") == "(nothing)"  # a required parameter still gets the (empty) text


# ---- a bad engine setting in pure mode --------------------------------------------------------------------


def test_a_bad_think_depth_does_not_break_pure_mode(monkeypatch, capsys, server_env):
    monkeypatch.setenv("THINK_DEPTH", "abc")
    assert cli.main(["run", "python", "print(6 * 7)"]) == 0
    assert capsys.readouterr().out.strip() == "42"
    assert cli.main(["ask", "hi"]) == cli.EXIT_CONFIG  # an app does use it
    assert "think_depth" in capsys.readouterr().err


# ---- images need Pillow only -------------------------------------------------------------------------------


def test_images_have_a_pillow_only_extra():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert [d.split(">")[0].lower() for d in extras["images"]] == ["pillow"]
    assert any(d.lower().startswith("pillow") for d in extras["experts"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "| `images` |" in readme


def test_handing_over_an_image_never_imports_torch(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from PIL import Image\n"
        "Image.new('RGB', (30, 20)).save('p.png')\n"
        "from chatgpt_tool_hub.apps import AppFactory\n"
        "from chatgpt_tool_hub.testing import ScriptedLLM\n"
        "app = AppFactory().create_app(tools_list=[], no_default=True, llm=ScriptedLLM(['AI: ok']))\n"
        "print(app.add_file('p.png'))\n"
        "print(app.ask('what is it?', files=['p.png']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert re.match(r"image/[0-9a-f]{8}\.png\nok\n", proc.stdout)


def test_a_missing_pillow_names_the_images_extra(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['PIL'] = None\n"
        "open('p.png', 'wb').write(b'not really')\n"
        "from chatgpt_tool_hub.apps import AppFactory\n"
        "from chatgpt_tool_hub.errors import UserError\n"
        "from chatgpt_tool_hub.testing import ScriptedLLM\n"
        "app = AppFactory().create_app(tools_list=[], no_default=True, llm=ScriptedLLM([]))\n"
        "try:\n"
        "    app.add_file('p.png')\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert 'pip install "chatgpt-tool-hub[images]"' in proc.stdout, proc.stdout + proc.stderr


# ---- doc snippets that run as shown ------------------------------------------------------------------------


def _python_blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)]


@pytest.mark.parametrize("name", ["subtrees.md", "tools.md"])
def test_doc_snippets_run_or_are_complete_files(name):
    for line, code in _python_blocks(ROOT / "docs" / name):
        first = code.splitlines()[0]
        if first == "# runnable":
            continue
        # a file of a package: named in its first line, and every name it uses is defined or imported
        assert re.fullmatch(r"# [\w/]+\.py", first), f"{name}:{line} is neither runnable nor a named file"
        ast.parse(code)
    files = [code for _, code in _python_blocks(ROOT / "docs" / name) if not code.startswith("# runnable")]
    if name == "tools.md":  # the package example shows every module it imports
        named = {code.splitlines()[0][2:] for code in files}
        assert {"my_weather_tools/__init__.py", "my_weather_tools/weather.py"} <= named, named

"""The public contract: chatbot embedding, configuration, secrets, ScriptedLLM, CLI.

Each test pins a behaviour that once was wrong.
"""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.apps.settings import load_settings
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.testing import ScriptedLLM, ScriptExhaustedError
from chatgpt_tool_hub.tools import tool
from chatgpt_tool_hub.tools.registry import ToolRegistry

from helpers import act, answer, echo, wait_until

SECRET = "sk-CONTRACT-NEVER-LEAK-0987654321"
posix_only = pytest.mark.skipif(os.name != "posix", reason="python tool workers are POSIX only")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _python(app):
    return next(t for t in app.tools if t.name == "python")


# ---- configuration -------------------------------------------------------------------------


def test_config_json_with_a_utf8_bom_is_read(tmp_path):
    # Windows editors (Notepad) save UTF-8 with a byte-order mark
    body = json.dumps({"tools": ["python"], "kwargs": {"think_depth": "2", "NO_DEFAULT": "1"}})
    (tmp_path / "config.json").write_bytes("\ufeff".encode() + body.encode())
    cfg = load_settings({}, environ={}, cwd=tmp_path)
    assert cfg["think_depth"] == 2 and cfg["no_default"] is True and cfg.tools == ["python"]


def test_a_bad_value_error_says_where_the_value_came_from(tmp_path):
    (tmp_path / ".env").write_text("THINK_DEPTH=lots\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.key == "think_depth"
    assert ".env" in str(info.value) and "THINK_DEPTH" in str(info.value)
    (tmp_path / ".env").unlink()
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={"TEMPERATURE": "hot"}, cwd=tmp_path)
    assert info.value.key == "temperature" and "environment" in str(info.value)


def test_upper_case_setting_keywords_are_honoured():
    cfg = load_settings({"THINK_DEPTH": "7", "Model_Name": "m"}, environ={})
    assert cfg["think_depth"] == 7 and cfg["model_name"] == "m"


def test_empty_create_app_keywords_do_not_erase_init_env_values():
    factory = AppFactory()
    factory.init_env(think_depth=5, model_name="from-init-env", temperature="0.3")
    # the chatbot plugin passes every key again, many of them empty
    app = factory.create_app(tools_list=[], llm=ScriptedLLM([]), no_default=True, think_depth="", model_name=None,
                             temperature="")
    assert app.settings.think_depth == 5
    assert app.config["model_name"] == "from-init-env" and app.config["temperature"] == 0.3
    # a set value still wins
    assert factory.create_app(llm=ScriptedLLM([]), no_default=True, think_depth="1").settings.think_depth == 1


def test_tools_list_as_a_string_or_a_single_tool():
    app = AppFactory().create_app(tools_list="python", llm=ScriptedLLM([]), no_default=True)
    assert app.tool_names == ["python"]
    app = AppFactory().create_app(tools_list="python, read-file", llm=ScriptedLLM([]), no_default=True)
    assert app.tool_names == ["python", "read-file"]
    app = AppFactory().create_app(tools_list=echo, llm=ScriptedLLM([]), no_default=True)
    assert app.tool_names == ["echo"]


def test_plugin_style_kwarg_types():
    app = AppFactory().create_app(tools_list=[], llm=ScriptedLLM([]), no_default="False", think_depth="2",
                                  temperature="0.7", request_timeout=None, log=True, debug="false",
                                  finance_news_filter_list=[], email_nickname_mapping="{}")
    assert app.settings.think_depth == 2 and app.config["temperature"] == 0.7
    assert app.config["request_timeout"] == 120.0 and app.config["debug"] is False
    assert "python" in app.tool_names  # no_default="False" is False


# ---- registry compatibility ---------------------------------------------------------------------


def test_register_tool_takes_chatgpt_tool_hub_keyword_names():
    registry = ToolRegistry()
    registry.register_tool("hello", lambda console=None, **kwargs: echo, tool_input_keys=["hello_api_key"])
    assert registry.get_registered_tool()["hello"][1] == ["hello_api_key"]
    assert registry.unregister_tool("hello") is True
    assert registry.unregister_tool("hello") is False
    registry.register_tool("one-key", function=lambda **kwargs: echo, tool_input_keys="one_api_key")
    assert registry.get_registered_tool()["one-key"][1] == ["one_api_key"]


def test_a_tool_listed_twice_is_built_once():
    built = []
    registry = ToolRegistry()

    def factory(**kwargs):
        built.append(1)
        return type(echo)(lambda text: text, name="counted", description="counts builds")

    registry.register_tool("counted", factory, default=True)
    app = AppFactory(registry).create_app(tools_list=["counted", "Counted"], llm=ScriptedLLM([]))
    assert app.tool_names == ["counted"] and len(built) == 1


# ---- chat history as chatbots pass it ---------------------------------------------------------------


def _sent(llm):
    return [(m["role"], m["content"]) for m in llm.requests[-1][1:]]


def test_vision_style_list_content_becomes_text_and_is_not_duplicated():
    llm = ScriptedLLM([answer("ok")] * 2)
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    history = [
        {"role": "system", "content": "persona"},
        {"role": "user", "content": [{"type": "text", "text": "what is in"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    ]
    app.ask("and now?", history)
    sent = _sent(llm)
    assert sent[-1] == ("user", "and now?") and len(sent) == 3
    assert sent[0][1].startswith("what is in") and "[image]" in sent[0][1] and "base64" not in sent[0][1]
    assert sent[1] == ("assistant", "a cat")


@pytest.mark.parametrize("last", ["$tool  what is  the weather?", "what is the   weather?\n", "#tool what is the weather?"])
def test_a_trailing_copy_of_the_query_with_a_trigger_prefix_or_other_spacing_is_dropped(last):
    llm = ScriptedLLM([answer("sunny")])
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    app.ask("what is the weather?", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                     {"role": "user", "content": last}])
    assert _sent(llm) == [("user", "hi"), ("assistant", "hello"), ("user", "what is the weather?")]


def test_a_different_pending_user_message_is_kept():
    llm = ScriptedLLM([answer("ok")])
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    app.ask("weather?", [{"role": "user", "content": "please say weather?"}])
    assert _sent(llm) == [("user", "please say weather?"), ("user", "weather?")]


def test_chat_history_may_be_any_iterable_of_messages():
    from collections import deque

    llm = ScriptedLLM([answer("ok")] * 2)
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    app.ask("q", deque([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]))
    assert _sent(llm) == [("user", "a"), ("assistant", "b"), ("user", "q")]
    app.ask("q", (m for m in [{"role": "User", "content": "c"}, {"role": "assistant", "content": "d"}]))
    assert _sent(llm) == [("user", "c"), ("assistant", "d"), ("user", "q")]


@posix_only
def test_chatbot_users_do_not_share_python_variables(tmp_path):
    """chat_history without session_id: each ask gets its own tool session, cleaned up afterwards."""
    llm = ScriptedLLM([act("python", "secret = 'alice-only'\nprint('set')"), answer("stored"),
                       act("python", "print(globals().get('secret', 'nothing'))"), answer("done")])
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))
    try:
        alice = [{"role": "system", "content": "bot"}, {"role": "user", "content": "store a secret"}]
        assert app.ask("store a secret", alice) == "stored"
        assert _python(app).worker_pids() == {}  # the call's worker is gone
        bob = [{"role": "system", "content": "bot"}, {"role": "user", "content": "what is stored?"}]
        result = app.run("what is stored?", bob)
        assert result.steps[0].observation.strip() == "nothing"
        # an explicit session keeps its variables between calls, as documented
        llm.add(act("python", "x = 41"), answer("a"), act("python", "print(x + 1)"), answer("b"))
        app.ask("one", [], session_id="alice")
        assert app.run("two", [], session_id="alice").steps[0].observation.strip() == "42"
    finally:
        app.close()


@posix_only
def test_concurrent_chatbot_asks_run_python_in_parallel_sessions(tmp_path):
    def reply(messages):
        user = [m for m in messages if m["role"] == "user"][-1]["content"]
        if user.startswith("Observation:"):
            return answer(user.split("Observation:", 1)[1].strip())
        n = user.split()[-1]
        return act("python", f"v = globals().get('v', 0) + {n}\nprint(v)")

    llm = ScriptedLLM([reply] * 16)
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        results[i] = app.ask(f"add {i}", [{"role": "user", "content": f"add {i}"}])

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(1, 9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {i: str(i) for i in range(1, 9)}  # nobody saw another user's v
        assert _python(app).worker_pids() == {}
    finally:
        app.close()


# ---- resources of apps that are dropped (``$tool reset`` builds a new app each time) --------------


@pytest.mark.slow
def test_dropped_apps_close_their_mcp_connections():
    pytest.importorskip("mcp")
    server = str(Path(__file__).parent / "fixtures" / "mcp_server.py")
    pids = []
    for _ in range(2):
        app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True,
                                      mcp_servers=[{"server": [sys.executable, server], "timeout": 15}])
        pids.append(int(next(t for t in app.tools if t.name.endswith("pid")).run("")))
        ref = weakref.ref(app)
        del app
        gc.collect()
        assert ref() is None
    assert all(_gone(pid) for pid in pids)


def test_dropping_an_app_does_not_close_tools_it_does_not_own():
    closed = []

    class Shared(type(echo)):
        def close(self):
            closed.append(self.name)

    shared = Shared(lambda text: text, name="shared", description="shared tool")
    registry = ToolRegistry()
    registry.register_tool("registered-instance", Shared(lambda text: text, name="registered-instance",
                                                         description="x"))
    # control: a tool the app builds from a factory is its own, and is closed with it
    registry.register_tool("built-per-app", lambda **kwargs: Shared(lambda text: text, name="built-per-app",
                                                                    description="x"))
    app = AppFactory(registry).create_app(tools_list=[shared, "registered-instance", "built-per-app"],
                                          llm=ScriptedLLM([]), no_default=True)
    ref = weakref.ref(app)
    del app
    gc.collect()
    assert ref() is None  # the app is really gone, so its finalizer has run
    assert wait_until(lambda: "built-per-app" in closed)
    assert closed == ["built-per-app"]


def test_dropped_planner_apps_stop_their_threads():
    plan = json.dumps([{"task": "echo", "id": 0, "dep": [-1], "args": {"text": "hello"}}])
    before = {t.ident for t in threading.enumerate()}
    for _ in range(3):
        app = AppFactory().create_app(app_type="planner", tools_list=[echo], llm=ScriptedLLM([plan, "ok"]),
                                      no_default=True)
        assert app.ask("q") == "ok"
        del app
        gc.collect()
    def extra() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("planner-")]

    assert wait_until(lambda: not extra()), extra()


# ---- secrets ------------------------------------------------------------------------------------------


@pytest.fixture
def root_log():
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield buf
    root.removeHandler(handler)
    root.setLevel(old)


def test_secrets_are_redacted_from_tracebacks_and_every_package_logger(root_log):
    @tool(name="leaky", description="fails with its URL")
    def leaky(text: str) -> str:
        raise RuntimeError(f"GET https://api.example/search?key={SECRET} failed")

    app = AppFactory().create_app(tools_list=[leaky], llm=ScriptedLLM([act("leaky", "x"), answer("ok")]),
                                  no_default=True, debug=True, bing_subscription_key=SECRET)
    assert app.ask("q") == "ok"
    for name in ("chatgpt_tool_hub.tools.openapi", "chatgpt_tool_hub.tools.mcp", "chatgpt_tool_hub.tools.plugins",
                 "chatgpt_tool_hub.llm", "chatgpt_tool_hub.tools.plugins.some_new_module"):
        logging.getLogger(name).warning("value %s", SECRET)
    text = root_log.getvalue()
    assert "RuntimeError" in text  # the traceback is still logged ...
    assert SECRET not in text       # ... without the key


def test_proxy_credentials_are_not_shown_in_app_config(root_log):
    app = AppFactory().create_app(tools_list=[], llm=ScriptedLLM([]), no_default=True,
                                  proxy="http://user:pr0xy-pa55word@proxy.local:3128",
                                  llm_api_base_url="https://bob:base-pa55word@llm.local/v1")
    shown = repr(app.config) + str(app.config)
    assert "pr0xy-pa55word" not in shown and "base-pa55word" not in shown
    assert "proxy.local:3128" in shown
    logging.getLogger("chatgpt_tool_hub.tools").warning("proxy is %s", "http://user:pr0xy-pa55word@proxy.local")
    assert "pr0xy-pa55word" not in root_log.getvalue()


# ---- ScriptedLLM -------------------------------------------------------------------------------------


def test_scripted_llm_takes_a_single_string_none_and_zero_argument_callables():
    assert ScriptedLLM("hello").replies == ["hello"]
    app = AppFactory().create_app(tools_list=[], llm=ScriptedLLM(answer("one reply")), no_default=True)
    assert app.ask("q") == "one reply"
    with pytest.raises(ScriptExhaustedError):
        ScriptedLLM(None).complete([{"role": "user", "content": "x"}])
    llm = ScriptedLLM([lambda: answer("no args"), lambda messages: answer(str(len(messages)))])
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    assert app.ask("q") == "no args"
    assert app.ask("q2") == "4"
    assert len(llm.requests) == 2 and all(isinstance(r, list) for r in llm.requests)


def test_scripted_llm_through_stream_from_many_threads():
    def reply(messages):
        return answer("r:" + [m for m in messages if m["role"] == "user"][-1]["content"])

    llm = ScriptedLLM([reply] * 12)
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    results = {}

    def worker(i):
        results[i] = list(app.stream(f"q{i}", []))[-1].text

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"r:q{i}" for i in range(12)} and len(llm.requests) == 12
    with pytest.raises(ScriptExhaustedError, match="ran out of replies"):
        list(app.stream("one more"))


# ---- the tool-hub command ------------------------------------------------------------------------------


def test_cli_answer_and_errors_are_not_hard_wrapped(chat_server, monkeypatch, capsys):
    from chatgpt_tool_hub import cli

    long = " ".join(f"word{i}" for i in range(60))
    monkeypatch.setenv("LLM_API_BASE_URL", chat_server.url)
    monkeypatch.setenv("MAX_RETRIES", "0")
    monkeypatch.setenv("NO_DEFAULT", "1")
    chat_server.replies = [answer(long)]
    assert cli.main(["ask", "hi"]) == 0
    assert capsys.readouterr().out.strip() == long
    assert cli.main(["run", "bing-search", "x"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "needs bing_subscription_key: pass it to create_app (bing_subscription_key=...)" in err
    assert "BING_SUBSCRIPTION_KEY" in err


def test_cli_approval_prompt_shows_the_exact_input(monkeypatch):
    """Rich markup in a tool input must neither hide parts of it nor crash the prompt."""
    from rich.console import Console
    from rich.prompt import Confirm

    from chatgpt_tool_hub.console import console_approver

    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    monkeypatch.setattr(Confirm, "ask", staticmethod(lambda *a, **k: False))
    approve = console_approver(console)
    for command in ("ls [abc]* && print(x[i])", "echo [/] done", "[bold]rm -rf /tmp/x[/bold]"):
        assert approve("terminal", command) is False
        assert command in out.getvalue()


@pytest.mark.parametrize("hidden", [
    "ls -la\u001b[2K\u001b[1Gtouch /tmp/pwned",          # the escape erases the line and moves the cursor back
    "ls -la" + "\n" * 60 + "touch /tmp/pwned",           # pushed off the screen by empty lines
    "ls -la\rtouch /tmp/pwned",                           # a carriage return overwrites the start
    "ls -la #\u202e dewnp/pmt/ hcuot\u202c",              # right-to-left override reverses what is seen
    "ls\u200b -la\u2060; touch /tmp/pwned",                 # zero-width characters split words
])
def test_the_approval_prompt_shows_what_will_run(monkeypatch, hidden):
    from rich.console import Console
    from rich.prompt import Confirm

    from chatgpt_tool_hub.console import console_approver

    out = io.StringIO()
    monkeypatch.setattr(Confirm, "ask", staticmethod(lambda *a, **k: False))
    console_approver(Console(file=out, width=120, force_terminal=True))("terminal", hidden)
    shown = out.getvalue()
    title, body = shown.split("\n", 1)  # the title is styled by the console; the input is printed plain
    for bad in ("\u001b", "\r", "\u202e", "\u202c", "\u200b", "\u2060"):
        assert bad not in body, repr(bad)
    assert "touch" in body or "hcuot" in body
    assert f"{len(hidden)} characters" in title and f"{hidden.count(chr(10)) + 1} line" in title
    if "\n" * 60 in hidden:
        assert "[... 59 empty lines ...]" in body and body.count("\n") < 10
    else:
        assert "\\u" in body or "\\x" in body  # the invisible characters are written out


def test_a_long_input_is_cut_with_a_marker_that_says_how_much_is_hidden():
    from chatgpt_tool_hub.console import show_input

    summary, shown = show_input("x" * 10_000, max_chars=1000)
    assert summary == "10000 characters, 1 line"
    assert "[... 9000 characters not shown ...]" in shown and len(shown) < 1100
    assert show_input({"code": "print(1)"})[1] == '{\n  "code": "print(1)"\n}'


def test_cli_repl_prints_errors_with_brackets(monkeypatch, capsys, tmp_path):
    from chatgpt_tool_hub import cli
    from chatgpt_tool_hub.errors import UserError

    class FailingApp:
        llm = None
        tool_names: list = []

        def stream(self, line):
            raise UserError("bad input [/] and [bold]x[/bold] kept")
            yield  # pragma: no cover

        def close(self):
            pass

    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    monkeypatch.setattr(cli, "_create_app", lambda args, console, **extra: FailingApp())
    lines = iter(["hello", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert cli.main([]) == 0
    assert "UserError: bad input [/] and [bold]x[/bold] kept" in capsys.readouterr().out


def test_llm_settings_with_stray_whitespace_work(chat_server):
    """A key pasted with a newline (.env, config.json) used to fail as a 'connection error'."""
    from chatgpt_tool_hub.llm.build import build_llm

    for key in (SECRET + "\n", f"  {SECRET}  "):
        llm = build_llm({"llm_api_key": key, "llm_api_base_url": f" {chat_server.url}\n", "max_retries": 0,
                         "model_name": " gpt-4o-mini "})
        assert llm.complete([{"role": "user", "content": "hi"}]).text == "OK"
        assert chat_server.requests[-1]["headers"]["authorization"] == f"Bearer {SECRET}"
        assert chat_server.bodies[-1]["model"] == "gpt-4o-mini"


def test_a_secret_pasted_with_a_newline_is_redacted_as_used(root_log):
    pasted = "bing-key-pasted-with-newline-5566"
    app = AppFactory().create_app(tools_list=[], llm=ScriptedLLM([]), no_default=True,
                                  bing_subscription_key=pasted + "\n")
    logging.getLogger("chatgpt_tool_hub.tools").warning("calling with %s", pasted)
    assert pasted not in root_log.getvalue()
    assert app.context.redactor.secrets  # the app is alive while its secrets are redacted

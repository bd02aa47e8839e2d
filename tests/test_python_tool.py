"""The ``python`` tool (persistent per-session workers) and the sandbox it runs in (POSIX)."""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, ToolInputError
from chatgpt_tool_hub.runtime.sandbox import run_sandboxed, scrubbed_env, strip_control, truncate_middle
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool, extract_code
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import process_gone, wait_gone, wait_until

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox limits are POSIX only")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def make_py(workspace: Path):
    """Build python tools on the test's workspace and close them (no worker outlives a test)."""
    built: list[PythonTool] = []

    def make(**kwargs) -> PythonTool:
        kwargs.setdefault("workspace_dir", str(workspace))
        tool = PythonTool.from_config(**kwargs)
        built.append(tool)
        return tool

    yield make
    for tool in built:
        tool.close()


@pytest.fixture
def py(make_py) -> PythonTool:
    return make_py(python_timeout=5, python_max_memory_mb=512)


def ctx(session_id: str) -> ToolContext:
    return ToolContext(session_id=session_id)


# ---- REPL semantics --------------------------------------------------------------


def test_print_output(py):
    assert py.run("print('hello')\nprint(6 * 7)") == "hello\n42"


@pytest.mark.parametrize("code, expected", [
    ("1+1", "2"),
    ("x = 3", "(no output)"),
    ("None", "(no output)"),
    ("x = 3\nx * 2", "6"),
    ("print(1)", "1"),  # print returns None: nothing more
    ("'a' + 'b'", "'ab'"),  # repr, as the REPL shows it
    ("[i * i for i in range(4)]", "[0, 1, 4, 9]"),
    ("print('a')\n'b'", "a\n'b'"),
])
def test_last_expression_value_is_shown(py, code, expected):
    assert py.run(code) == expected


@pytest.mark.parametrize("text", [
    "```python\nprint(5)\n```",
    "```py\nprint(5)\n```\n",
    "```\nprint(5)\n```",
    "`print(5)`",
    "Here is the code:\n```python\nprint(5)\n```\nIt prints five.",
    "    x = 5\n    print(x)",  # indented as a whole
])
def test_fenced_and_wrapped_input(py, text):
    assert py.run(text) == "5"


def test_extract_code_leaves_valid_code_alone():
    code = "s = '```'\nprint(s)"
    assert extract_code(code) == code


def test_dict_input(py):
    assert py.run({"code": "print(1)"}) == "1"
    assert py.run({"code": "print(2)", "reason": "testing"}) == "2"


def test_empty_input_is_a_tool_input_error(py):
    with pytest.raises(ToolInputError):
        py.run("   ")


def test_top_level_await(py):
    assert py.run("import asyncio\nawait asyncio.sleep(0, 'done')") == "'done'"


def test_input_does_not_wait(py):
    assert "EOFError" in py.run("input('name? ')")


def test_unicode_passes_and_ansi_escapes_are_stripped(py):
    assert py.run("print('é 中文 ✓')") == "é 中文 ✓"
    assert py.run(r"print('\x1b[31mred\x1b[0m \x1b]0;title\x07plain\x07')") == "red plain"
    assert py.run(r"print('a\r\nb\x08c')") == "a\nbc"


def test_modules_in_the_workspace_are_importable(py, workspace):
    (workspace / "helper.py").write_text("VALUE = 99\n")
    assert py.run("from helper import VALUE\nVALUE") == "99"


# ---- errors ----------------------------------------------------------------------


def test_exception_shows_the_users_traceback(py):
    out = py.run("print('before')\n1/0")
    assert out.startswith("before\n")
    assert "ZeroDivisionError: division by zero" in out
    assert 'File "<input>", line 2' in out
    assert "_python_worker" not in out


def test_syntax_error(py):
    out = py.run("def f(:\n    pass")
    assert "SyntaxError" in out
    assert 'File "<input>", line 1' in out
    assert "_python_worker" not in out and "ast.py" not in out


def test_compile_error_without_frames(py):
    out = py.run("return 5")
    assert "SyntaxError" in out and "_python_worker" not in out


def test_deep_traceback_is_trimmed(py):
    code = "def f(n):\n    if n == 0:\n        raise ValueError('deep')\n    return g(n - 1)\n" \
           "def g(n):\n    return f(n)\nf(60)"
    out = py.run(code)
    assert "ValueError: deep" in out
    assert "frames omitted" in out
    assert out.count('File "<input>"') < 40


def test_sys_exit_status_keeps_the_session(py):
    assert py.run("import sys; sys.exit(0)") == "(no output)"
    assert py.run("kept = 1\nimport sys; sys.exit(3)") == "(exit status 3)"
    assert py.run("kept") == "1"


def test_timeout_kills_the_group_and_the_next_call_starts_fresh(make_py):
    py = make_py(python_timeout=1)
    assert py.run("state = 'old'\nstate") == "'old'"
    code = ("import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print('started', child.pid, flush=True)\n"
            "while True: pass")
    out = py.run(code)
    assert out.startswith("started")
    assert "Error: the code ran longer than 1 s and was stopped (python_timeout)" in out
    assert "earlier calls are lost" in out
    assert wait_gone(int(out.split()[1]))  # the child the code started is gone too
    assert py.run("print('again')") == "again"
    assert "NameError" in py.run("state")


@pytest.mark.parametrize("bomb", ["x = bytearray(4 * 1024**3)", "'a' * 10**10"])
def test_memory_bomb_is_a_memory_error_and_the_worker_survives(make_py, bomb):
    py = make_py(python_max_memory_mb=256)
    py.run("kept = 41")
    out = py.run(bomb)
    assert "MemoryError" in out and "Traceback" in out
    assert py.run("kept + 1") == "42"


def test_huge_output_is_truncated_and_parent_survives(make_py):
    py = make_py(python_max_output_chars=1000)
    out = py.run("print('start' + 'x' * 10_000_000 + 'end')")
    assert out.startswith("startxxx") and out.endswith("xxxend")
    assert "\n... [" in out and "characters omitted] ...\n" in out
    assert len(out) < 1100
    omitted = int(out.split("... [")[1].split(" ")[0])
    assert omitted == len("start") + 10_000_000 + len("end") + 1 - 1000  # +1: print's newline


def test_100_mb_print_costs_the_parent_no_memory(make_py):
    py = make_py(python_max_output_chars=1000, python_timeout=20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out = py.run("print('a' * 100_000_000)\n'done'")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert out.startswith("aaa") and out.endswith("'done'") and "characters omitted" in out
    assert len(out) < 1100
    assert grown_mb < 50


def test_error_after_huge_output_keeps_the_traceback(make_py):
    py = make_py(python_max_output_chars=2000)
    out = py.run("print('y' * 100_000)\nraise KeyError('tail')")
    assert "characters omitted" in out and "KeyError: 'tail'" in out


# ---- persistent sessions ---------------------------------------------------------------


def test_variables_persist_within_a_session_not_across(py):
    assert py.run("x = 21\ndef double(v):\n    return 2 * v", ctx("a")) == "(no output)"
    assert py.run("double(x)", ctx("a")) == "42"
    assert "NameError: name 'x' is not defined" in py.run("x", ctx("b"))
    assert py.run("import math\nmath.floor(2.5)") == "2"  # pure mode: session "default"
    assert py.run("math.pi > 3") == "True"
    assert "NameError" in py.run("math", ctx("a"))


def test_reset_clears_one_session_or_all(py):
    for session in ("a", "b", "c"):
        py.run(f"name = {session!r}", ctx(session))
    py.reset("a")
    assert "NameError" in py.run("name", ctx("a"))
    assert py.run("name", ctx("b")) == "'b'"
    py.reset()
    assert "NameError" in py.run("name", ctx("b")) and "NameError" in py.run("name", ctx("c"))


def test_writes_to_the_real_stdout_fds_do_not_corrupt_the_protocol(py):
    code = ("import os, subprocess, struct\n"
            "os.write(1, b'raw out\\n')\n"
            "os.write(2, b'raw err\\n')\n"
            "os.write(1, struct.pack('>I', 12) + b'{\"status\": 1}')\n"
            "subprocess.run(['echo', 'from a child'])\n"
            "print('printed')")
    out = py.run(code)
    for part in ("raw out", "raw err", "from a child", "printed"):
        assert part in out
    assert py.run("1 + 1") == "2"


def test_redirected_or_closed_streams_are_restored_for_the_next_call(py):
    py.run("import os, sys\nsys.stdout = open(os.devnull, 'w')\nos.close(2)")
    assert py.run("print('visible')\n1/0").startswith("visible\nTraceback")


def test_protocol_fds_are_not_inherited_by_the_codes_children(py):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc")
    out = py.run("import subprocess\nprint(subprocess.run(['ls', '/proc/self/fd'], capture_output=True, "
                 "text=True, close_fds=False).stdout.split())")
    assert set(eval(out)) <= {"0", "1", "2", "3"}  # 3: the fd ls opened to read the folder


def test_a_worker_that_exits_is_reported_and_replaced(py):
    py.run("kept = 1")
    out = py.run("import os\nos._exit(5)")
    assert "Error: the Python process exited (status 5)" in out and "earlier calls are lost" in out
    assert "NameError" in py.run("kept")


def test_a_worker_killed_between_calls_is_noticed(py):
    py.run("kept = 1")
    pid = py.worker_pids()["default"]
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: process_gone(pid))
    out = py.run("2 + 2")
    assert out.startswith("(note: the previous Python process had ended") and out.endswith("\n4")


def test_concurrent_calls_in_two_sessions_run_in_parallel(make_py):
    # no clock: each call announces itself in the workspace and waits for the other one's announcement,
    # which only comes in time when both run at once (serially, the first waits alone and says so)
    py = make_py(python_timeout=60, python_max_memory_mb=512)  # the wait below is generous, for busy machines
    results: dict[str, str] = {}
    code = ("import os, time\n"
            "open('{me}.here', 'w').close()\n"
            "deadline = time.monotonic() + 30\n"
            "while not os.path.exists('{other}.here') and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
            "print('met' if os.path.exists('{other}.here') else 'alone')")

    def call(me: str, other: str) -> None:
        results[me] = py.run(code.format(me=me, other=other), ctx(me))

    py.run("0", ctx("a")), py.run("0", ctx("b"))  # start both workers first
    threads = [threading.Thread(target=call, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"a": "met", "b": "met"}


def test_calls_in_one_session_are_serialised(py):
    outs: list[str] = []
    code = "import time\ncounter = globals().get('counter', 0)\ntime.sleep(0.2)\ncounter += 1\ncounter"
    threads = [threading.Thread(target=lambda: outs.append(py.run(code))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outs) == ["1", "2", "3"]


def test_reset_during_a_call_ends_it(py, workspace):
    outs: list[str] = []
    code = "import time\nopen('started', 'w').close()\ntime.sleep(30)"
    thread = threading.Thread(target=lambda: outs.append(py.run(code)))
    thread.start()
    assert wait_until(lambda: (workspace / "started").exists())  # the call runs
    py.reset("default")
    thread.join(60)
    assert not thread.is_alive()
    assert "the session was reset" in outs[0]  # ended by the reset, not by python_timeout
    assert py.run("1") == "1" and len(py.worker_pids()) == 1


def test_idle_workers_beyond_the_limit_are_evicted_lru(make_py):
    py = make_py(python_max_workers=2)
    for session in ("a", "b", "c"):
        py.run(f"name = {session!r}", ctx(session))
    assert set(py.worker_pids()) == {"b", "c"}
    assert "NameError" in py.run("name", ctx("a"))  # a came back fresh, b was the oldest now
    assert set(py.worker_pids()) == {"c", "a"}


def test_close_leaves_no_worker_processes(py):
    pids = [int(py.run("import os; os.getpid()", ctx(s))) for s in ("a", "b", "c")]
    holders = list(py.worker_pids().values())  # the process that holds each worker (its supervisor)
    assert len(set(holders)) == 3 and not set(holders) & set(pids)
    py.close()
    assert all(wait_gone(pid) for pid in pids + holders)
    assert py.worker_pids() == {}
    py.close()  # twice is fine
    assert py.run("'usable again'") == "'usable again'"


def test_workers_end_when_the_tool_is_garbage_collected(workspace):
    import gc

    tool = PythonTool.from_config(workspace_dir=str(workspace))
    pid = int(tool.run("import os; os.getpid()"))
    del tool
    gc.collect()
    assert wait_gone(pid)


def test_engine_keeps_serving_after_timeouts_and_bad_input(workspace):
    llm = ScriptedLLM([
        "Action: python\nAction Input: n = 7",
        "Action: python\nAction Input: while True: pass",
        "Action: python\nAction Input:    ",
        "Action: python\nAction Input: print('still here')",
        "Thought: Do I need to use a tool? No\nAI: done",
    ])
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, think_depth=5,
                                  workspace_dir=str(workspace), python_timeout=1)
    try:
        result = app.run("go")
    finally:
        app.close()
    assert result.output == "done"
    observations = [step.observation for step in result.steps]
    assert "python_timeout" in observations[1]
    assert observations[2].startswith("Error:")
    assert observations[3] == "still here"


# ---- isolation -------------------------------------------------------------------


def test_environment_is_scrubbed(py, workspace, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("BING_SEARCH_API_KEY", "bing-secret")
    out = py.run("import os\nprint(sorted(os.environ))\nprint(os.environ.get('LLM_API_KEY'))\n"
                 "print(os.environ.get('OPENAI_API_KEY'))\nprint(dict(os.environ))")
    assert "secret" not in out
    assert "LLM_API_KEY" not in out and "OPENAI_API_KEY" not in out
    assert "\nNone\nNone\n" in out
    assert py.run("import os; os.environ['HOME']") == repr(str(workspace.resolve()))
    assert py.run("import os; os.environ['PYTHONIOENCODING']") == "'utf-8'"


def test_working_directory_is_the_workspace(py, workspace):
    assert py.run("import os; os.getcwd()") == repr(str(workspace.resolve()))
    assert py.run("open('out.txt', 'w').write('data')") == "4"
    assert (workspace / "out.txt").read_text() == "data"


def test_temp_dir_is_private_and_removed_with_the_worker(py):
    out = py.run("import os, tempfile\nd = tempfile.gettempdir()\nprint(d)\nprint(os.environ['TMPDIR'] == d)")
    tmp, same = out.splitlines()
    assert same == "True" and Path(tmp).is_dir()
    py.reset()
    assert not Path(tmp).exists()


def test_runs_in_its_own_process_group(py):
    """The worker's session and group are its supervisor's, not the application's."""
    out = py.run("import os\nprint(os.getpgid(0) == os.getsid(0), os.getsid(0) == os.getpid())")
    assert out == ("True False" if sys.platform.startswith("linux") else "True True")
    assert int(py.run("import os; os.getsid(0)")) not in (os.getsid(0), os.getpgid(0))


# ---- configuration ---------------------------------------------------------------


def test_from_config_ignores_junk_and_types_values(tmp_path):
    junk = {f"key_{i}": "" for i in range(60)}
    junk.update(bing_subscription_key="", morning_news_api_key="", wolfram_alpha_appid="", debug="",
                think_depth=2, model_name="gpt", request_timeout="")
    workspace = tmp_path / "a" / "b"
    tool = PythonTool.from_config(python_timeout="5", python_max_memory_mb="300", python_max_output_chars="",
                                  workspace_dir=str(workspace), **junk)
    assert tool.timeout == 5.0 and isinstance(tool.timeout, float)
    assert tool.max_memory_mb == 300
    assert tool.max_output_chars == 8000
    assert tool.workspace == workspace.resolve() and workspace.is_dir()
    assert tool.name == "python" and tool.parameters is None and tool.description


def test_from_config_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tool = PythonTool.from_config(python_timeout="", workspace_dir="")
    assert (tool.timeout, tool.max_memory_mb, tool.max_output_chars) == (30.0, 1024, 8000)
    assert tool.workspace == (tmp_path / "workspace").resolve() and tool.workspace.is_dir()
    assert tool.workspace.is_absolute()


def test_from_config_bad_values(tmp_path):
    with pytest.raises(ConfigError) as info:
        PythonTool.from_config(python_timeout="soon", workspace_dir=str(tmp_path))
    assert info.value.key == "python_timeout"
    with pytest.raises(ConfigError):
        PythonTool.from_config(python_timeout="0", workspace_dir=str(tmp_path))


def test_builtin_factory(tmp_path):
    tool = main_tool_register.build("python", workspace_dir=str(tmp_path), python_timeout="3", unrelated="", other=None)
    assert isinstance(tool, PythonTool) and tool.timeout == 3.0
    assert tool.run("2 ** 10") == "1024"


# ---- the sandbox on its own --------------------------------------------------------


def test_strip_control():
    assert strip_control("\x1b[1;32mok\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b(Bz") == "ok link z"
    assert strip_control("tab\tnew\nline\x07\x00") == "tab\tnew\nline"
    assert strip_control("50%\r100%\r\n") == "50%\n100%\n"


def test_truncate_middle():
    assert truncate_middle("short", 10) == "short"
    assert truncate_middle("x" * 50, 0) == "x" * 50
    out = truncate_middle("a" * 10 + "b" * 80 + "c" * 10, 20)
    assert out == "a" * 10 + "\n... [80 characters omitted] ...\n" + "c" * 10


def test_scrubbed_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_API_KEY", "sk-secret")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    env = scrubbed_env({"EXTRA": "1"}, home=tmp_path)
    assert "LLM_API_KEY" not in env and "PYTHONPATH" not in env
    assert env["HOME"] == str(tmp_path) and env["EXTRA"] == "1"
    assert env["PYTHONIOENCODING"] == "utf-8" and env["PATH"] and env["TMPDIR"]


def test_sandbox_stdin_and_output_cap(tmp_path):
    data = "0123456789" * 100_000  # 1 MB through stdin and back: no deadlock
    result = run_sandboxed([sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"],
                           stdin=data, cwd=tmp_path, timeout=10, max_memory_mb=512, max_output_chars=100)
    assert result.returncode == 0 and not result.timed_out and result.truncated
    assert result.output.startswith("0123456789") and result.output.endswith("0123456789")
    assert f"[{len(data) - 100} characters omitted]" in result.output


def test_sandbox_child_that_ignores_stdin(tmp_path):
    result = run_sandboxed([sys.executable, "-c", "print('x' * 200_000)"], stdin="y" * 1_000_000,
                           cwd=tmp_path, timeout=10, max_output_chars=50)
    assert result.returncode == 0 and result.truncated and not result.timed_out





def test_sandbox_timeout_kills_the_process_group(tmp_path):
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    result = run_sandboxed([sys.executable, "-c", code], cwd=tmp_path, timeout=1.0)
    assert time.monotonic() - started < 30  # far below the 60 s of the child that holds the output open
    assert result.timed_out and result.returncode == -9
    assert wait_gone(int(result.output.split()[0]))


def test_sandbox_ends_background_children_after_exit(tmp_path):
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid)\n")
    started = time.monotonic()
    result = run_sandboxed([sys.executable, "-c", code], cwd=tmp_path, timeout=40)
    assert time.monotonic() - started < 30  # far below the 60 s of the background child: it was not waited for
    assert result.returncode == 0 and not result.timed_out
    assert wait_gone(int(result.output.split()[0]))


def test_sandbox_missing_command(tmp_path):
    result = run_sandboxed(["no-such-command-xyz"], cwd=tmp_path, timeout=5)
    assert result.returncode == 127 and "no-such-command-xyz" in result.output

"""The ``python`` tool and the sandbox it runs in (POSIX)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolInputError
from chatgpt_tool_hub.tools.builtin import _python_factory
from chatgpt_tool_hub.tools.builtin._sandbox import run_sandboxed, scrubbed_env, truncate_middle
from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool, extract_code

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox limits are POSIX only")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def py(workspace: Path) -> PythonTool:
    return PythonTool.from_config(python_timeout=5, python_max_memory_mb=512, workspace_dir=str(workspace))


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


def test_unicode_and_ansi_pass_through(py):
    assert py.run("print('é 中文 ✓')") == "é 中文 ✓"
    assert py.run(r"print('\x1b[31mred\x1b[0m')") == "\x1b[31mred\x1b[0m"


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


def test_sys_exit_status(py):
    assert py.run("import sys; sys.exit(0)") == "(no output)"
    assert "exit status 3" in py.run("import sys; sys.exit(3)")


def test_timeout_stops_the_code_and_the_tool_keeps_working(workspace):
    py = PythonTool.from_config(python_timeout=1, workspace_dir=str(workspace))
    started = time.monotonic()
    out = py.run("print('started')\nwhile True: pass")
    assert time.monotonic() - started < 5
    assert out.startswith("started")
    assert "Error: the code ran longer than 1 s and was stopped (python_timeout)" in out
    assert py.run("print('again')") == "again"


@pytest.mark.parametrize("bomb", ["x = bytearray(4 * 1024**3)", "'a' * 10**10"])
def test_memory_bomb_is_a_memory_error(workspace, bomb):
    py = PythonTool.from_config(python_max_memory_mb=256, workspace_dir=str(workspace))
    out = py.run(bomb)
    assert "MemoryError" in out
    assert py.run("1 + 1") == "2"


def test_huge_output_is_truncated_and_parent_survives(workspace):
    py = PythonTool.from_config(python_max_output_chars=1000, workspace_dir=str(workspace))
    out = py.run("print('start' + 'x' * 10_000_000 + 'end')")
    assert out.startswith("startxxx") and out.endswith("xxxend")
    assert "\n... [" in out and "characters omitted] ...\n" in out
    assert len(out) < 1100
    omitted = int(out.split("... [")[1].split(" ")[0])
    assert omitted == len("start") + 10_000_000 + len("end") + 1 - 1000  # +1: print's newline


def test_error_after_huge_output_keeps_the_traceback(workspace):
    py = PythonTool.from_config(python_max_output_chars=2000, workspace_dir=str(workspace))
    out = py.run("print('y' * 100_000)\nraise KeyError('tail')")
    assert "characters omitted" in out and "KeyError: 'tail'" in out


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


def test_temp_dir_is_private_and_removed(py):
    out = py.run("import os, tempfile\nd = tempfile.gettempdir()\nprint(d)\nprint(os.environ['TMPDIR'] == d)")
    tmp, same = out.splitlines()
    assert same == "True"
    assert not Path(tmp).exists()


def test_runs_in_its_own_process_group(py):
    out = py.run("import os\nprint(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())")
    assert out == "True True"


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
    tool = _python_factory(workspace_dir=str(tmp_path), python_timeout="3", unrelated="", other=None)
    assert isinstance(tool, PythonTool) and tool.timeout == 3.0
    assert tool.run("2 ** 10") == "1024"


# ---- the sandbox on its own --------------------------------------------------------


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


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie nobody reaped yet counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _wait_gone(pid: int) -> bool:
    for _ in range(50):
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_sandbox_timeout_kills_the_process_group(tmp_path):
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    result = run_sandboxed([sys.executable, "-c", code], cwd=tmp_path, timeout=1.0)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.returncode == -9
    assert _wait_gone(int(result.output.split()[0]))


def test_sandbox_ends_background_children_after_exit(tmp_path):
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid)\n")
    started = time.monotonic()
    result = run_sandboxed([sys.executable, "-c", code], cwd=tmp_path, timeout=10)
    assert time.monotonic() - started < 5
    assert result.returncode == 0 and not result.timed_out
    assert _wait_gone(int(result.output.split()[0]))


def test_sandbox_missing_command(tmp_path):
    result = run_sandboxed(["no-such-command-xyz"], cwd=tmp_path, timeout=5)
    assert result.returncode == 127 and "no-such-command-xyz" in result.output

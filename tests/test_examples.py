"""The examples and the documentation's code run as written.

* Every script in ``examples/`` that works offline runs as a subprocess
  (``sys.executable examples/x.py``) in a temporary folder, with no LLM
  settings in the environment, and its output is checked.
* Every ```python block in ``docs/*.md`` and ``README.md`` whose first line is
  ``# runnable`` runs the same way. Runnable blocks use ``ScriptedLLM``, so they
  need no key and no network; other blocks are illustrations and are not run.
* Relative links in the docs point to files that exist.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import act, answer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
RUNNABLE_MARK = "# runnable"
TIMEOUT_S = 60

_LLM_ENV_PREFIXES = ("LLM_", "OPENAI_", "MODEL_NAME", "THINK_DEPTH", "REQUEST_TIMEOUT", "PROXY", "DEBUG",
                     "TEMPERATURE", "NO_DEFAULT", "PYTHON_", "CONFIG_PATH", "ENV_FILE", "WORKSPACE_DIR",
                     "MAX_RETRIES", "DEPLOYMENT_ID", "PROMPT_LANGUAGE", "MEMORY_MAX_TOKENS")


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without any LLM or tool setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(_LLM_ENV_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONIOENCODING"] = "utf-8"
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def run_python(script: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, encoding="utf-8", timeout=TIMEOUT_S)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


# ---- examples/ ----------------------------------------------------------------------


def test_every_example_has_a_docstring_that_says_how_to_run_it():
    scripts = sorted(EXAMPLES.glob("*.py"))
    assert {p.name for p in scripts} >= {"quickstart.py", "custom_tool.py", "streaming_events.py",
                                         "chatbot_plugin.py", "local_server.py"}
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert text.lstrip().startswith('"""'), f"{script.name} has no module docstring"
        docstring = text.split('"""')[1]
        assert "python examples/" in docstring, f"{script.name}'s docstring does not say how to run it"


def test_quickstart_runs_offline_and_says_so(tmp_path):
    out = ok(run_python(EXAMPLES / "quickstart.py", tmp_path))
    assert "mode: offline" in out
    assert "LLM_API_KEY" in out and "LLM_API_BASE_URL" in out
    assert "832040" in out  # the 30th Fibonacci number, computed by the real python tool
    assert "stopped by: answer" in out


def test_custom_tool_prints_steps_and_usage(tmp_path):
    out = ok(run_python(EXAMPLES / "custom_tool.py", tmp_path))
    assert "step 1: convert-temperature" in out and "step 3: python" in out
    assert "-> 37.0" in out            # 98.6 °F in °C, from the @tool function
    assert "status=error" in out and "expects a JSON object" in out   # a bad input came back as an observation
    assert "0.4 °C above" in out       # computed by the real python tool
    assert "LLM calls: 4" in out and "tokens" in out
    assert "answer: " in out and "stopped by: answer" in out


def test_streaming_events_shows_every_kind(tmp_path):
    out = ok(run_python(EXAMPLES / "streaming_events.py", tmp_path))
    for kind in ("[token]", "[thought]", "[action]", "[observation]", "[error]", "[answer]"):
        assert kind in out, kind
    assert "python" in out and "1024" in out
    assert out.rstrip().splitlines()[-1].startswith("kinds seen:")


def test_chatbot_plugin_follows_the_call_sequence(tmp_path):
    out = ok(run_python(EXAMPLES / "chatbot_plugin.py", tmp_path))
    assert "tools of the app: ['python', 'read-file', 'list-dir', 'url-get', 'meteo-weather']" in out
    assert "bot> 6 x 7 = 42" in out
    assert "bot> You asked me to multiply 6 by 7." in out
    assert "the question was sent once" in out
    assert "pure mode> pure mode works" in out


def test_local_server_exits_clearly_when_no_server_answers(tmp_path):
    with socket.socket() as sock:  # a port that nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = run_python(EXAMPLES / "local_server.py", tmp_path, "--base-url", f"http://127.0.0.1:{port}/v1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "No OpenAI-compatible server answered" in text
    assert "ollama serve" in text and "Traceback" not in text


def test_local_server_talks_to_a_chat_completions_server(tmp_path, chat_server):
    chat_server.replies = [act("python", "print(sum(range(101)))"), answer("The sum is 5050.")]
    out = ok(run_python(EXAMPLES / "local_server.py", tmp_path, "--base-url", chat_server.url,
                        "--model", "test-model"))
    assert "The sum is 5050." in out
    body = chat_server.bodies[0]
    assert body["model"] == "test-model" and body["stream"] is True
    assert chat_server.requests[0]["headers"]["authorization"] == "Bearer no-key-required"
    assert chat_server.bodies[1]["messages"][-1]["content"].startswith("Observation: 5050")


# ---- documentation code blocks ----------------------------------------------------


_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def runnable_blocks() -> list[tuple[str, int, str]]:
    """(file, line, code) of every ```python block that starts with '# runnable'."""
    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(DOCS.glob("tools/*.md")), *sorted(DOCS.glob("experts/*.md"))]:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            code = match.group(1)
            if code.lstrip().startswith(RUNNABLE_MARK):
                line = text.count("\n", 0, match.start()) + 1
                found.append((str(path.relative_to(ROOT)), line, code))
    return found


BLOCKS = runnable_blocks()


def test_each_guide_has_runnable_examples():
    per_file = {name for name, _, _ in BLOCKS}
    for guide in ("engine.md", "configuration.md", "tools.md", "llm.md", "cli.md"):
        assert f"docs/{guide}" in per_file, f"docs/{guide} has no '{RUNNABLE_MARK}' python block"


@pytest.mark.parametrize("name,line,code", BLOCKS, ids=[f"{n}:{line}" for n, line, _ in BLOCKS])
def test_doc_block_runs(name, line, code, tmp_path):
    script = tmp_path / "doc_block.py"
    script.write_text(code, encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    proc = run_python(script, work)
    assert proc.returncode == 0, (f"{name}:{line} failed (exit status {proc.returncode})\n"
                                  f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")


def test_configuration_doc_lists_every_setting():
    from chatgpt_tool_hub.config import SETTINGS

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("| `"):  # the first row naming a key is its row in the settings table
            rows.setdefault(line.split("|")[1].strip().strip("`"), line)
    for key, setting in SETTINGS.items():
        assert key in rows, f"docs/configuration.md does not list the setting {key!r}"
        for env in setting.env_names:
            assert f"`{env}`" in rows[key], f"docs/configuration.md: {key!r} row lacks {env}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)


def test_relative_links_in_docs_point_to_files():
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(DOCS.glob("tools/*.md")), *sorted(DOCS.glob("experts/*.md"))]:
        prose = _CODE.sub("", path.read_text(encoding="utf-8"))
        for target in _LINK.findall(prose):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            file_part = target.split("#", 1)[0]
            assert (path.parent / file_part).exists(), f"{path.name}: broken link {target}"

"""``tool-hub ask`` with no key, no server and no local: model: one screen with the three ways to get a model."""

from __future__ import annotations

import os
import subprocess
import sys

from chatgpt_tool_hub import cli

_RUN_CLI = "import sys; from chatgpt_tool_hub.cli import main; sys.exit(main(sys.argv[1:]))"


def _scrubbed_run(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """``tool-hub`` in a process whose environment has only PATH and an empty HOME (like ``env -i``), in an
    empty folder (no .env, no config.json)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return subprocess.run([sys.executable, "-c", _RUN_CLI, *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_ask_without_a_model_prints_the_three_choices_and_fails(tmp_path):
    done = _scrubbed_run(tmp_path, "ask", "hi")
    assert done.returncode == cli.EXIT_CONFIG
    screen = done.stderr
    assert "Traceback" not in screen and done.stdout == ""
    lines = screen.strip().splitlines()
    assert 10 <= len(lines) <= 20, screen
    assert "No LLM is configured" in lines[0]
    assert "LLM_API_KEY=" in screen and "OPENAI_API_KEY" in screen  # 1. a key
    assert "LLM_API_BASE_URL=http://localhost:11434/v1" in screen  # 2. a local server, with an example
    assert all(server in screen for server in ("llama.cpp", "Ollama", "vLLM", "LM Studio"))
    assert 'pip install "chatgpt-tool-hub[local]"' in screen  # 3. the in-process tiny model
    assert 'tool-hub ask --model local:smollm2 "what is 37*41?"' in screen


def test_a_local_model_needs_no_key(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    done = _scrubbed_run(tmp_path, "ask", "--model", f"local:{missing}", "hi")
    assert done.returncode == cli.EXIT_ERROR
    assert "No LLM is configured" not in done.stderr and "Traceback" not in done.stderr
    assert "GGUF file" in done.stderr and "not found" in done.stderr  # it got as far as loading the model

"""Shared fixtures: an isolated environment per test, the local chat server, markers."""

from __future__ import annotations

import os

import pytest

from chat_server import chat_server  # noqa: F401  (fixture)

_ENV_PREFIXES = ("LLM_", "OPENAI_", "MODEL_NAME", "THINK_DEPTH", "REQUEST_TIMEOUT", "PROXY", "DEBUG",
                 "TEMPERATURE", "NO_DEFAULT", "PYTHON_", "CONFIG_PATH", "ENV_FILE", "WORKSPACE_DIR", "TOOL_CALLING",
                 "MAX_", "PROMPT_LANGUAGE", "MEMORY_MAX_TOKENS", "OBSERVATION_MAX_CHARS")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Each test runs in its own folder with no LLM settings in the environment."""
    for name in list(os.environ):
        if name.upper().startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)

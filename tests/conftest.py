"""Shared fixtures: an isolated environment per test, the local chat server, markers."""

from __future__ import annotations

import pytest

from chat_server import chat_server  # noqa: F401  (fixture)
from env_scrub import settings_environment


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Each test runs in its own empty folder (no ./config.json, no ./.env) with no settings in the environment."""
    for name in settings_environment():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture(autouse=True)
def restore_log_levels():
    """``debug=True`` (0.5's switch) sets the package loggers' level process-wide; each test starts from
    the levels the session had."""
    import logging

    from chatgpt_tool_hub.apps.logs import PACKAGE_LOGGERS

    saved = {name: logging.getLogger(name).level for name in PACKAGE_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


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

"""Shared fixtures: an isolated environment per test, the local chat and service servers, markers."""

from __future__ import annotations

import pytest

from env_scrub import settings_environment

# fixtures every test may use without importing them: chat_server; service_server, smtp_server;
# fresh_token_cache, no_tiktoken
pytest_plugins = ["chat_server", "service_fixtures", "token_fixtures"]


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


# markers the default run leaves out (pyproject.toml's addopts); the summary says how many it left out
LEFT_OUT_MARKERS = ("slow", "browser", "clients", "openwebui", "realmodel")
_left_out = pytest.StashKey[dict]()


def pytest_configure(config):
    config.stash[_left_out] = dict.fromkeys(LEFT_OUT_MARKERS, 0)


def pytest_deselected(items):
    """Count the deselected tests that carry a left-out marker (for the hint at the end of the run)."""
    for item in items:
        for name in LEFT_OUT_MARKERS:
            if item.get_closest_marker(name) is not None:
                item.config.stash[_left_out][name] += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say which tests the marker expression left out and how to run them, so that a run of a slow test's
    file that collects nothing is no riddle."""
    left = {name: count for name, count in config.stash.get(_left_out, {}).items() if count}
    if left and config.option.markexpr and not config.option.keyword:
        counts = ", ".join(f"{count} {name}" for name, count in left.items())
        chosen = " or ".join(left)
        terminalreporter.write_line(f"left out by -m {config.option.markexpr!r}: {counts} test(s); "
                                    f'run them with -m "{chosen}", or everything with -m ""')


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

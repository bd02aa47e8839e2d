"""Shared fixtures: an isolated environment per test, the local chat server, markers."""

from __future__ import annotations

import os

import pytest

from chat_server import chat_server  # noqa: F401  (fixture)

# Besides the app's own settings: where settings files are looked for, the OpenAI client's own
# variables, and proxies (the LLM client honours them, which would route the local chat server's
# traffic through a developer's proxy).
_LOADER_NAMES = ("CONFIG_PATH", "ENV_FILE")
_EXTRA_PREFIXES = ("openai_", "http_proxy", "https_proxy", "all_proxy", "no_proxy")


def settings_environment(environ=None) -> list[str]:
    """The names in ``environ`` (default ``os.environ``) that could change what an app reads.

    Derived from the code, not listed here: every name of the settings table
    (``Setting.env_names``), every prefix and key the factory reads for the
    registered tools and the shared services (``apps.factory.env_prefixes``),
    the loader's ``CONFIG_PATH`` / ``ENV_FILE``, ``OPENAI_*`` and proxies.
    """
    from chatgpt_tool_hub.apps.factory import env_prefixes
    from chatgpt_tool_hub.config import SETTINGS
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    environ = os.environ if environ is None else environ
    exact = {name.upper() for setting in SETTINGS.values() for name in setting.env_names}
    exact.update(_LOADER_NAMES)
    prefixes = tuple(p.lower() for p in env_prefixes(main_tool_register)) + _EXTRA_PREFIXES
    return [name for name in environ if name.upper() in exact or name.lower().startswith(prefixes)]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Each test runs in its own empty folder (no ./config.json, no ./.env) with no settings in the environment."""
    for name in settings_environment():
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

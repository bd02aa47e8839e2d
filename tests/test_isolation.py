"""The test suite's own isolation: a developer's environment and folder cannot change results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from chatgpt_tool_hub.config import SETTINGS

from env_scrub import settings_environment

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# what a developer may well have exported: each would change some test's result
DEVELOPER_ENV = {
    "DEPLOYMENT_ID": "my-azure-deployment",   # turns on the Azure client
    "URL_GET_ALLOW_PRIVATE": "true",          # switches the SSRF guard off
    "THINK_DEPTH": "0",
    "PYTHON_TIMEOUT": "1",
    "TERMINAL_TIMEOUT": "1",
    "LLM_API_KEY": "sk-developer",
    "OPENAI_API_KEY": "sk-developer",
    "OPENAI_ORG_ID": "org-developer",
    "OPENAI_API_BASE": "http://127.0.0.1:9/v1",
    "CONFIG_PATH": "/nonexistent/config.json",
    "ENV_FILE": "/nonexistent/.env",
    "BING_SUBSCRIPTION_KEY": "bing-key",
    "WOLFRAM_ALPHA_APPID": "wolfram-id",
    "IMAGE_CAPTIONING_MODEL": "some/model",
    "PLANNER_TOP_K": "1",
    "MCP_SERVERS": "[]",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
}
# what the suite needs and must keep
KEPT = {"PATH": "/usr/bin", "HOME": "/home/dev", "PYTHONPATH": "/x", "LANG": "C.UTF-8", "TERM": "xterm",
        "HF_HUB_OFFLINE": "1", "TMPDIR": "/tmp", "PYTEST_ADDOPTS": "-q"}


def test_every_setting_tool_and_service_variable_is_scrubbed():
    table = {name: "x" for setting in SETTINGS.values() for name in setting.env_names}
    environ = {**table, **DEVELOPER_ENV, **KEPT}
    scrubbed = set(settings_environment(environ))
    assert scrubbed == set(table) | set(DEVELOPER_ENV)
    assert not scrubbed & set(KEPT)


def test_the_names_follow_the_registry(monkeypatch):
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    assert "GADGET_MODE" not in settings_environment({"GADGET_MODE": "1"})
    monkeypatch.setattr(main_tool_register, "get_registered_tool_names",
                        lambda: ["python", "gadget-tool"])
    assert settings_environment({"GADGET_TOOL_MODE": "1", "PATH": "/bin"}) == ["GADGET_TOOL_MODE"]


PROBE = '''
import os
from pathlib import Path

from chatgpt_tool_hub.apps.factory import env_prefixes
from chatgpt_tool_hub.apps.settings import load_settings
from chatgpt_tool_hub.tools.tool_register import main_tool_register

DEVELOPER_ENV = {names!r}


def test_probe(tmp_path):
    assert sorted(name for name in DEVELOPER_ENV if name in os.environ) == []
    config = load_settings({{}}, tool_prefixes=env_prefixes(main_tool_register))
    assert config["think_depth"] == 3 and config["deployment_id"] is None and config["llm_api_key"] is None
    assert "url_get_allow_private" not in config.values and "python_timeout" not in config.values
    assert set(config.sources.values()) == {{"default"}}
    assert Path.cwd() == tmp_path
'''


def test_a_developer_environment_and_folder_do_not_reach_a_test(tmp_path):
    """A real pytest session, started with a developer's variables and from a folder with settings files."""
    home = tmp_path / "project"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"kwargs": {"think_depth": 0, "deployment_id": "from-json"}}))
    (home / ".env").write_text("THINK_DEPTH=0\nPYTHON_TIMEOUT=1\nURL_GET_ALLOW_PRIVATE=true\n")
    probe = tmp_path / "probe" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(textwrap.dedent(PROBE.format(names=sorted(DEVELOPER_ENV))))
    (probe.parent / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, **DEVELOPER_ENV,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    # the suite's conftest, loaded as a plugin, is what isolates the probe
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "-c", str(probe.parent / "pytest.ini"), str(probe)],
                          cwd=home, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]

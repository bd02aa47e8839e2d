"""``requests`` is loaded by the first fetch, not by building an app or answering without one."""

from __future__ import annotations

import json
import subprocess
import sys

from chatgpt_tool_hub.runtime import netguard, urlcheck

FIRST_ANSWER = """
import json, sys
from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM

app = AppFactory().create_app(llm=ScriptedLLM(["AI: hi"]))
answer = app.ask("x")
seen = {"answer": answer, "tools": list(app.tool_names), "requests": "requests" in sys.modules,
        "url_get_loaded": "chatgpt_tool_hub.tools.builtin.url_get" in sys.modules}
from chatgpt_tool_hub.tools.builtin.url_get import FetchError, Page, html_to_text  # its re-exports
seen["html_to_text"] = html_to_text("<title>T</title><p>body</p>")
seen["requests_after_reexports"] = "requests" in sys.modules
print(json.dumps(seen))
"""


def _run(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_building_an_app_and_a_first_answer_do_not_import_requests():
    seen = _run(FIRST_ANSWER)
    assert seen["answer"] == "hi"
    assert "url-get" in seen["tools"] and seen["url_get_loaded"]  # the tool whose module used to pull requests in
    assert seen["html_to_text"] == ["T", "body"]
    assert seen["requests"] is False
    assert seen["requests_after_reexports"] is False


def test_a_fetch_imports_requests_when_it_runs():
    code = ("import json, sys\n"
            "from chatgpt_tool_hub.runtime.webpage import FetchLimits, fetch_page\n"
            "before = 'requests' in sys.modules\n"
            "try:\n"
            "    fetch_page('http://127.0.0.1:9/', FetchLimits())\n"
            "except Exception as exc:\n"
            "    error = type(exc).__name__\n"
            "print(json.dumps({'before': before, 'after': 'requests' in sys.modules, 'error': error}))\n")
    seen = _run(code)
    assert seen == {"before": False, "after": True, "error": "BlockedURLError"}


def test_netguard_still_exports_the_url_check_names():
    for name in urlcheck.__all__:
        assert getattr(netguard, name) is getattr(urlcheck, name)
    assert set(urlcheck.__all__) <= set(netguard.__all__)

"""The real Open WebUI in front of ``tool-hub serve``, driven in headless Chromium.

One ``tool-hub serve`` (``ScriptedLLM`` behind it, under uvicorn on
127.0.0.1) and one Open WebUI for the module: Open WebUI runs in an
environment of its own (``pip install open-webui``; .ci/run makes it) whose
``open-webui`` executable is named by ``TOOL_HUB_OPENWEBUI``; without it the
tests fail and say how to make it (they are never skipped). Open WebUI is
started as its docs say for a single user without login (``WEBUI_AUTH=False``),
pointed at the server with its key, forwarding its user and chat ids
(``ENABLE_FORWARD_USER_INFO_HEADERS``) and with ``tool-hub-direct`` as its task
model; offline (no version check, no embedding model loaded or downloaded).
The browser resolves no host but 127.0.0.1, and every request it made is
checked at the end.

The LLM behind the server answers each question from its script; a request
that is one of Open WebUI's own task prompts (``### Task:``: a title, tags,
follow-ups) gets a small JSON answer and is counted apart, as one that came
straight to the LLM or, wrongly, through the tool engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
from test_server_support import Live, free_port
from test_web_browser import WAIT_S, click, headless_chrome, requested_urls

from chatgpt_tool_hub.llm.base import StreamChunk
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

pytestmark = pytest.mark.openwebui

KEY = "owui-test-key"
USER_HEADER, CHAT_HEADER = "X-OpenWebUI-User-Id", "X-OpenWebUI-Chat-Id"
START_S = 120  # Open WebUI's first start (database migrations) takes a while on 2 cores
ANSWER_S = 60
MISSING = ("the Open WebUI tests need Open WebUI in an environment of its own: python3 -m venv ~/.cache/"
           "tool-hub-openwebui-venv, then its bin/pip install torch==2.13.0 (first: the CPU build), then "
           "bin/pip install open-webui==0.12.4, and TOOL_HUB_OPENWEBUI=~/.cache/tool-hub-openwebui-venv/bin/"
           "open-webui (.ci/run does all of it)")

PNG_CODE = ("import struct, zlib\n"
            "def chunk(kind, data):\n"
            "    body = kind + data\n"
            "    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))\n"
            "rows = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 24 for _ in range(16))\n"
            "png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 24, 16, 8, 2, 0, 0, 0))\n"
            "       + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))\n"
            "open('red.png', 'wb').write(png)\n"
            "print('wrote red.png')")
FENCED = "print('```')\nprint('inside the fence')"  # an observation holding a code fence of its own
SCRIPTS: dict[str, list[str]] = {
    "What is the capital of France?": [answer("The capital of France is Paris.")],
    "Count slowly to twenty.": [answer(" ".join(f"n{i}" for i in range(1, 21)) + " done counting")],
    "Show me your work on six times seven.": [act("python", FENCED), answer("Worked it out: 42.")],
    "Draw a red box.": [act("python", PNG_CODE), answer("Here it is: red.png")],
    "Remember the fruit kiwi.": [act("python", "fruit = 'kiwi'\nprint('remembered', fruit)"),
                                 answer("Remembered.")],
    "Which fruit do you remember?": [act("python", "print(globals().get('fruit', 'no fruit'))"), answer("@obs")],
    "What is two plus two?": [answer("Four.")],
    "What is three plus three?": [answer("Six.")],
}
SLOW = {"Count slowly to twenty."}  # its answer streams with a pause between words
TITLE = "A scripted chat"
RELEASE_NOTES = "//button[starts-with(normalize-space(.), 'Okay, Let')]"


class OpenWebUILLM(ScriptedLLM):
    """The LLM behind the server. Each question of :data:`SCRIPTS` runs its steps (one per observation since the
    question), the runs it started counted in ``runs``; a step ``@obs`` answers with the last observation.
    Open WebUI's task prompts get a JSON answer, their kinds recorded in ``direct_tasks`` (they came as they
    are) or ``engine_tasks`` (the tool engine ran them)."""

    def __init__(self) -> None:
        super().__init__([], chunk_size=1)
        self.runs: dict[str, int] = {}
        self.direct_tasks: list[str] = []
        self.engine_tasks: list[str] = []
        self._guard = threading.Lock()

    def complete(self, messages: Sequence[Any], *, stop: Sequence[str] | None = None,
                 tools: Sequence[dict[str, Any]] | None = None) -> Any:
        self.add(self._reply(list(messages)))
        return super().complete(messages, stop=stop, tools=tools)

    def stream(self, messages: Sequence[Any], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StreamChunk]:
        slow = _question(messages) in SLOW
        for chunk in super().stream(messages, stop=stop, tools=tools):
            if slow and chunk.text:
                time.sleep(0.15)
            yield chunk

    def _reply(self, messages: list[dict]) -> str:
        with self._guard:
            task = next((m["content"] for m in messages if m.get("role") == "user"
                         and str(m.get("content", "")).lstrip().startswith("### Task:")), None)
            if task is not None:
                kind, reply = _task_answer(task)
                through_engine = any(m.get("role") == "system" and "Action Input" in str(m.get("content"))
                                     for m in messages)
                (self.engine_tasks if through_engine else self.direct_tasks).append(kind)
                return answer(reply) if through_engine else reply
            question = _question(messages)
            if question is None:
                return answer("unscripted question")
            step = _steps_since(messages, question)
            if step == 0:
                self.runs[question] = self.runs.get(question, 0) + 1
            steps = SCRIPTS[question]
            text = steps[min(step, len(steps) - 1)]
            last = str(messages[-1].get("content", ""))
            if step > 0 and last.startswith("Observation:"):
                text = text.replace("@obs", last[len("Observation:"):].strip("`\n "))
            return text


def _question(messages: Sequence[Any]) -> str | None:
    """The last question of :data:`SCRIPTS` among the user messages."""
    for message in reversed(list(messages)):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.strip() in SCRIPTS:
            return content.strip()
    return None


def _steps_since(messages: Sequence[Any], question: str) -> int:
    """How many observations the run of ``question`` has had (the messages after its last mention)."""
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user" and
               str(m.get("content", "")).strip() == question)
    return sum(1 for m in messages[last + 1:] if str(m.get("content", "")).startswith("Observation:"))


def _task_answer(prompt: str) -> tuple[str, str]:
    """The kind of an Open WebUI task prompt and a JSON answer to it."""
    lowered = prompt.lower()
    if "follow_ups" in lowered or "follow-up" in lowered:
        return "follow-ups", json.dumps({"follow_ups": ["And then?"]})
    if "tags" in lowered:
        return "tags", json.dumps({"tags": ["General"]})
    if "title" in lowered:
        return "title", json.dumps({"title": TITLE})
    return "other", json.dumps({"queries": []})


class Recorder:
    """The server's ASGI app, recording of each chat request its model, ``stream`` and Open WebUI's identity
    headers in ``requests``."""

    def __init__(self, app: Any):
        self.app, self.state = app, app.state
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        parts: list[bytes] = []

        async def tapped() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = json.loads(b"".join(parts) or b"{}")
                    self.requests.append({"model": body.get("model"), "stream": bool(body.get("stream")),
                                          "user": headers.get(USER_HEADER.lower()),
                                          "chat": headers.get(CHAT_HEADER.lower())})
            return message

        return await self.app(scope, tapped, send)


# ---- the two servers and the browser -------------------------------------------------------------------------------


def _open_webui_executable() -> str:
    path = os.environ.get("TOOL_HUB_OPENWEBUI", "")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{MISSING} (TOOL_HUB_OPENWEBUI={path!r})", pytrace=False)
    return path


def _open_webui_env(server: Live, data: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    return {
        **keep,
        "DATA_DIR": str(data), "WEBUI_SECRET_KEY": "tool-hub-openwebui-test-secret-of-32-bytes-or-more", "WEBUI_AUTH": "False",
        "ENABLE_OLLAMA_API": "False", "ENABLE_OPENAI_API": "True",
        "OPENAI_API_BASE_URL": server.url, "OPENAI_API_KEY": KEY,
        "DEFAULT_MODELS": "tool-hub", "TASK_MODEL_EXTERNAL": "tool-hub-direct",
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
        "ENABLE_TITLE_GENERATION": "True", "ENABLE_TAGS_GENERATION": "True", "ENABLE_FOLLOW_UP_GENERATION": "True",
        "ENABLE_AUTOCOMPLETE_GENERATION": "False", "ENABLE_SEARCH_QUERY_GENERATION": "False",
        "ENABLE_RETRIEVAL_QUERY_GENERATION": "False",
        # offline: no version check, no model downloads, no embedding model loaded at start
        "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "RAG_EMBEDDING_ENGINE": "openai", "RAG_EMBEDDING_MODEL": "", "RAG_RERANKING_MODEL": "",
        "BYPASS_EMBEDDING_AND_RETRIEVAL": "true", "ENABLE_WEB_SEARCH": "False", "AUDIO_STT_ENGINE": "webapi",
        "ENABLE_VERSION_UPDATE_CHECK": "false", "ENABLE_COMMUNITY_SHARING": "False",
        "SCARF_NO_ANALYTICS": "true", "DO_NOT_TRACK": "true", "ANONYMIZED_TELEMETRY": "false",
        "ENV": "prod", "GLOBAL_LOG_LEVEL": "WARNING",
    }


def settle(driver: Any, condition: Any, seconds: float = WAIT_S) -> Any:
    """``wait`` through Svelte re-rendering: an element gone stale meanwhile is looked up again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - 127.0.0.1 only
            return reply.status == 200
    except OSError:
        return False


class OpenWebUI:
    """``open-webui serve`` on 127.0.0.1 in a process group of its own, its output in ``log``."""

    def __init__(self, executable: str, env: dict[str, str], data: Path):
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        data.mkdir(parents=True, exist_ok=True)
        self.log = data / "open-webui.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen([executable, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                                            env=env, cwd=data, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        started = time.monotonic()
        while not _healthy(self.root + "/health"):
            if self.process.poll() is not None or time.monotonic() - started > START_S:
                self.stop()
                pytest.fail(f"Open WebUI did not answer {self.root}/health within {START_S} s; its log ends:\n"
                            f"{self.tail()}", pytrace=False)
            time.sleep(0.5)
        self.startup_s = time.monotonic() - started

    def tail(self, chars: int = 4000) -> str:
        """The end of Open WebUI's log, without its database migrations."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "alembic" not in line)[-chars:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(15)


class Stack:
    """The browser on Open WebUI's page, Open WebUI, the server behind it (its requests in ``recorder``) and the
    LLM behind that."""

    def __init__(self, driver: Any, webui: OpenWebUI, server: Live, recorder: Recorder, llm: OpenWebUILLM):
        self.driver, self.webui, self.server, self.recorder, self.llm = driver, webui, server, recorder, llm

    def new_chat(self) -> None:
        self.driver.get(self.webui.root + "/")
        self._ready()

    def open_chat(self, url: str) -> None:
        self.driver.get(url)
        self._ready()

    def _ready(self) -> None:
        settle(self.driver, lambda d: d.find_elements("id", "chat-input"), START_S)

    def dismiss_release_notes(self) -> None:
        """Close "What's New in Open WebUI", which a first visit shows over the chat."""
        found = settle(self.driver, lambda d: d.find_elements("xpath", RELEASE_NOTES), START_S)
        click(self.driver, found[0])
        settle(self.driver, lambda d: not d.find_elements("xpath", RELEASE_NOTES))

    def ask(self, question: str, expected: str) -> Any:
        """Send ``question`` in the open chat; the assistant's message once its answer shows ``expected``."""
        before = len(self.messages())
        self.send(question)
        try:
            settle(self.driver, lambda d: len(self.messages()) > before and expected in self.answer_text(),
                   ANSWER_S)
        except Exception as exc:
            raise AssertionError(f"{expected!r} never showed; the page shows {self.answer_text()!r}; "
                                 f"Open WebUI's log ends:\n{self.webui.tail()}") from exc
        return self.messages()[-1]

    def send(self, question: str) -> None:
        """Type ``question`` into the chat input and send it once the editor holds it."""
        from selenium.webdriver.common.keys import Keys

        box = self.driver.find_element("id", "chat-input")
        click(self.driver, box)
        box.send_keys(question)
        settle(self.driver, lambda d: d.find_element("id", "chat-input").text.strip() == question)
        box.send_keys(Keys.ENTER)
        settle(self.driver, lambda d: d.find_elements("xpath", f"//*[normalize-space(text())={question!r}]"))

    def messages(self) -> list[Any]:
        return self.driver.find_elements("css selector", ".chat-assistant")

    def answer_text(self) -> str:
        """The text of the last assistant message's answer (what follows the reasoning block)."""
        found = self.messages()
        prose = found[-1].find_elements("css selector", ".markdown-prose") if found else []
        return prose[-1].text if prose else ""

    def chat_id(self) -> str:
        url = self.driver.current_url
        assert "/c/" in url, f"not in a saved chat: {url}"
        return url.rsplit("/c/", 1)[1]

    def api(self, path: str, body: Any = None) -> Any:
        """Open WebUI's own API as the signed-in user (the page's token)."""
        token = self.driver.execute_script("return localStorage.token")
        request = urllib.request.Request(self.webui.root + path, method="GET" if body is None else "POST",
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - 127.0.0.1 only
            return json.load(reply)

    def quiet(self, seconds: float = 1.5) -> None:
        """Wait until the server has had no chat request for ``seconds`` (the last chat's tasks are done)."""
        deadline = time.monotonic() + ANSWER_S
        count, since = len(self.recorder.requests), time.monotonic()
        while time.monotonic() - since < seconds:
            assert time.monotonic() < deadline, "Open WebUI never stopped sending requests"
            time.sleep(0.1)
            if len(self.recorder.requests) != count:
                count, since = len(self.recorder.requests), time.monotonic()

    def tasks_settled(self, count: int) -> None:
        """Wait until ``count`` task prompts in all have reached the LLM and a moment passed without more."""
        deadline = time.monotonic() + ANSWER_S
        while len(self.llm.direct_tasks) + len(self.llm.engine_tasks) < count:
            assert time.monotonic() < deadline, (self.llm.direct_tasks, self.llm.engine_tasks)
            time.sleep(0.1)
        time.sleep(1.0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    from chatgpt_tool_hub.server import create_server

    executable = _open_webui_executable()
    root = tmp_path_factory.mktemp("openwebui")
    llm = OpenWebUILLM()
    recorder = Recorder(create_server(llm=llm, tools_list=["python"], no_default=True, serve_api_keys=KEY,
                                      serve_user_header=USER_HEADER, serve_session_header=CHAT_HEADER,
                                      serve_workspace_root=str(root / "users")))
    server = Live(recorder, free_port()).start()
    webui = driver = None
    try:
        webui = OpenWebUI(executable, _open_webui_env(server, root / "data"), root / "data")
        driver = headless_chrome()
        stack = Stack(driver, webui, server, recorder, llm)
        stack.new_chat()
        stack.dismiss_release_notes()
        yield stack
        elsewhere = [u for u in requested_urls(driver) if not u.startswith((webui.root, server.root, "data:", "blob:"))]
    finally:
        if driver is not None:
            driver.quit()
        if webui is not None:
            webui.stop()
        server.stop()
    assert elsewhere == [], f"Open WebUI's page reached for other hosts: {elsewhere}"


# ---- the cases --------------------------------------------------------------------------------------------------


def test_a_question_gets_the_scripted_answer(stack):
    stack.new_chat()
    question = "What is the capital of France?"
    stack.ask(question, "The capital of France is Paris.")
    assert stack.answer_text() == "The capital of France is Paris."
    asked = [r for r in stack.recorder.requests if r["model"] == "tool-hub"]
    assert asked and asked[-1]["stream"], stack.recorder.requests  # Open WebUI streams by default
    assert stack.llm.runs[question] == 1


def test_the_answer_streams_into_the_page_word_by_word(stack):
    from selenium.common.exceptions import StaleElementReferenceException

    stack.new_chat()
    before = len(stack.messages())
    stack.send("Count slowly to twenty.")
    seen: list[str] = []
    deadline = time.monotonic() + ANSWER_S
    while "done counting" not in (seen[-1] if seen else ""):
        assert time.monotonic() < deadline, f"the answer never finished; seen: {seen[-3:]}"
        try:
            text = stack.answer_text() if len(stack.messages()) > before else ""
        except StaleElementReferenceException:  # the message was rendered anew meanwhile
            continue
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        time.sleep(0.05)
    partial = [s for s in seen if s.startswith("n1") and "done counting" not in s]
    assert len(partial) >= 3, f"the answer did not grow in the page as it streamed: {seen}"
    assert seen[-1] == " ".join(f"n{i}" for i in range(1, 21)) + " done counting"


def test_the_monologue_shows_in_the_reasoning_block_as_well_formed_markdown(stack):
    stack.new_chat()
    message = stack.ask("Show me your work on six times seven.", "Worked it out: 42.")
    toggles = [b for b in message.find_elements("css selector", "button[aria-expanded]") if "Thought" in b.text]
    assert toggles, f"no reasoning block in the message: {message.text!r}"
    click(stack.driver, toggles[0])
    settle(stack.driver, lambda d: "Observation:" in message.text)
    paragraphs = [p.text for p in message.find_elements("css selector", "#response-content-container p")]
    code = [c.text for c in message.find_elements("css selector", ".cm-content")]
    assert "Action: python" in paragraphs and "Observation:" in paragraphs, paragraphs
    assert any("print('inside the fence')" in c for c in code), code  # the action input, a code block
    observation = [c for c in code if "inside the fence" in c and "print(" not in c]
    assert observation and observation[0].startswith("```"), code  # the output's own fence stays inside
    # the output held a fence of its own: it did not swallow what follows, which is a paragraph again
    assert "Thought: Do I need to use a tool? No" in paragraphs, paragraphs
    assert not any("Do I need to use a tool? No" in c for c in code), code
    assert stack.answer_text() == "Worked it out: 42."


def test_an_image_the_python_tool_writes_is_displayed_from_files(stack):
    stack.new_chat()
    message = stack.ask("Draw a red box.", "Here it is")
    images = [i for i in message.find_elements("css selector", "img") if "/files/" in (i.get_attribute("src") or "")]
    assert images, f"no image from /files in the answer: {message.get_attribute('innerHTML')[-2000:]}"
    src = images[0].get_attribute("src")
    assert src.startswith(stack.server.root + "/files/") and "red.png" in src
    settle(stack.driver, lambda d: d.execute_script("return arguments[0].complete", images[0]))
    size = stack.driver.execute_script("return [arguments[0].naturalWidth, arguments[0].naturalHeight]", images[0])
    assert size == [24, 16], f"the image did not load in Open WebUI's page ({src}): {size}"


def test_each_chat_gets_its_own_python_session_of_open_webuis_user(stack):
    stack.new_chat()
    stack.ask("Remember the fruit kiwi.", "Remembered.")
    first = stack.driver.current_url
    first_id = stack.chat_id()
    stack.new_chat()
    stack.ask("Which fruit do you remember?", "no fruit")  # another chat: another session
    second_id = stack.chat_id()
    stack.open_chat(first)
    stack.ask("Which fruit do you remember?", "kiwi")  # the first chat's session kept its variable
    assert stack.answer_text() == "kiwi"
    user = stack.api("/api/v1/auths/")["id"]
    chats = {r["chat"] for r in stack.recorder.requests if r["model"] == "tool-hub"}
    assert {first_id, second_id} <= chats and first_id != second_id
    assert {r["user"] for r in stack.recorder.requests} == {user}
    folders = [p.name for p in stack.server.state.apps.root.iterdir()]
    assert len(folders) == 1 and folders[0].startswith(user), folders  # Open WebUI's user, not "default"


def _one_chat_with_its_tasks(stack, question: str, expected: str) -> list[dict]:
    """Ask ``question`` in a new chat; the requests the server got for it, title, tags and follow-ups included."""
    stack.quiet()
    stack.new_chat()
    tasks = len(stack.llm.direct_tasks) + len(stack.llm.engine_tasks)
    requests = len(stack.recorder.requests)
    stack.ask(question, expected)
    stack.tasks_settled(tasks + 3)
    settle(stack.driver, lambda d: TITLE in d.title)  # the title Open WebUI asked for is the chat's
    return stack.recorder.requests[requests:]


def test_titles_tags_and_follow_ups_go_to_the_direct_model_and_cost_no_run(stack):
    sent = _one_chat_with_its_tasks(stack, "What is two plus two?", "Four.")
    assert stack.llm.runs["What is two plus two?"] == 1
    assert stack.llm.engine_tasks == []
    assert sorted(stack.llm.direct_tasks[-3:]) == ["follow-ups", "tags", "title"]
    assert [r["model"] for r in sent].count("tool-hub") == 1
    assert [r["model"] for r in sent].count("tool-hub-direct") == 3, sent


def test_without_a_task_model_the_task_prompts_are_recognised_and_cost_no_run(stack):
    config = stack.api("/api/v1/tasks/config")
    stack.api("/api/v1/tasks/config/update", {**config, "TASK_MODEL_EXTERNAL": ""})
    try:
        sent = _one_chat_with_its_tasks(stack, "What is three plus three?", "Six.")
    finally:
        stack.api("/api/v1/tasks/config/update", config)
    assert {r["model"] for r in sent} == {"tool-hub"} and len(sent) == 4, sent  # all to the chat's model
    assert stack.llm.runs["What is three plus three?"] == 1
    assert stack.llm.engine_tasks == []
    assert sorted(stack.llm.direct_tasks[-3:]) == ["follow-ups", "tags", "title"]

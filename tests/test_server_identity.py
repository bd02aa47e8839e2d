"""End users behind a trusted chat UI: ``serve_user_header`` and ``serve_session_header``.

Open WebUI (``ENABLE_FORWARD_USER_INFO_HEADERS=true``) sends no ``user``
field but names its user in ``X-OpenWebUI-User-Id`` and the chat in
``X-OpenWebUI-Chat-Id``. With the settings on, each of its users gets their
own workspace, app and python worker, and each chat its own python session;
the header names a user within the request's key, never across keys.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.server.asgi import ApiError
from chatgpt_tool_hub.server.settings import ServeSettings
from chatgpt_tool_hub.server.users import MAX_HEADER_CHARS, User, end_user, identify
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

USER, CHAT = "X-OpenWebUI-User-Id", "X-OpenWebUI-Chat-Id"
HEADERS = {"serve_user_header": USER, "serve_session_header": CHAT}


def _python_llm(codes: dict[str, str], calls: int = 40) -> ScriptedLLM:
    """Each question (a key of ``codes``) runs its python code once; the answer is what the code printed."""
    def reply(messages: list[dict]) -> str:
        last = messages[-1]["content"]
        if last.startswith("Observation:"):
            return answer(last[len("Observation:"):].strip())
        return act("python", codes[last])

    return ScriptedLLM([reply] * calls)


def _ask(server, question: str, key: str | None = None, timeout: float = 60.0, **headers: str) -> str:
    client = server.client(key, default_headers=headers).with_options(timeout=timeout)
    reply = client.chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content


def _user(server, name: str, key: str | None = None) -> User:
    found = identify(f"Bearer {key}" if key else None, None, server.state.settings.api_keys)
    return User(found.key_id, name)


PEEK = "print(globals().get('secret', 'no secret here'))"


def test_two_open_webui_users_get_their_own_workspace_and_python_and_never_wait_for_each_other(live, tmp_path):
    go = tmp_path / "go"
    wait = (f"import os, time\nsecret = 'alice'\nopen('mine.txt', 'w').write('a')\nend = time.time() + 20\n"
            f"while not os.path.exists({str(go)!r}) and time.time() < end:\n    time.sleep(0.05)\nprint('done', secret)")
    server = live(llm=_python_llm({"wait": wait, "peek": PEEK}), tools_list=["python"], **HEADERS)
    alice: dict[str, str] = {}
    slow = threading.Thread(target=lambda: alice.update(reply=_ask(server, "wait", **{USER: "alice-id"})))
    slow.start()
    try:
        deadline = time.monotonic() + 30
        while not (server.state.apps.workspace(_user(server, "alice-id")) / "mine.txt").exists():
            assert time.monotonic() < deadline, "alice's code never started"
            time.sleep(0.02)
        started = time.monotonic()
        assert _ask(server, "peek", timeout=15, **{USER: "bob-id"}) == "no secret here"  # not alice's variables
        assert time.monotonic() - started < 10 and slow.is_alive()  # bob did not queue behind alice's python
    finally:
        go.write_text("go")
        slow.join(30)
    assert alice["reply"] == "done alice"
    alice_ws, bob_ws = (server.state.apps.workspace(_user(server, name)) for name in ("alice-id", "bob-id"))
    assert alice_ws != bob_ws and alice_ws.name.startswith("alice-id-") and bob_ws.name.startswith("bob-id-")
    assert (alice_ws / "mine.txt").is_file() and not (bob_ws / "mine.txt").exists()
    pids = [app.tools[0].worker_pids() for app in server.state.apps.all_apps()]
    assert len(pids) == 2 and set(pids[0].values()).isdisjoint(pids[1].values())  # two python workers


def test_each_chat_of_a_user_is_its_own_python_session_and_the_same_chat_keeps_its_variables(live):
    server = live(llm=_python_llm({"set": "secret = 41\nprint('set')", "peek": PEEK,
                                   "use": "print(secret + 1)"}), tools_list=["python"], **HEADERS)
    assert _ask(server, "set", **{USER: "alice-id", CHAT: "chat-1"}) == "set"
    assert _ask(server, "peek", **{USER: "alice-id", CHAT: "chat-2"}) == "no secret here"
    assert _ask(server, "use", **{USER: "alice-id", CHAT: "chat-1"}) == "42"
    (app,) = server.state.apps.all_apps()  # one user, one app: two sessions in it
    assert len(app.tools[0].worker_pids()) == 2


def test_the_same_header_under_two_keys_is_two_users(live):
    server = live(llm=_python_llm({"set": "secret = 41\nprint('set')", "peek": PEEK}), tools_list=["python"],
                  serve_api_keys="key-a,key-b", serve_shared_trust=True, **HEADERS)
    assert _ask(server, "set", "key-a", **{USER: "same-id"}) == "set"
    assert _ask(server, "peek", "key-b", **{USER: "same-id"}) == "no secret here"
    assert _ask(server, "peek", "key-a", **{USER: "same-id"}) == "41"
    assert _ask(server, "peek", "key-a") == "no secret here"  # the key's own user is yet another one
    a, b = _user(server, "same-id", "key-a"), _user(server, "same-id", "key-b")
    assert a != b and server.state.apps.workspace(a) != server.state.apps.workspace(b)


def test_without_the_settings_the_headers_are_ignored_and_the_user_field_still_counts(live):
    server = live(llm=_python_llm({"set": "secret = 41\nprint('set')", "peek": PEEK}), tools_list=["python"])
    assert _ask(server, "set", **{USER: "alice-id", CHAT: "chat-1"}) == "set"
    assert _ask(server, "peek", **{USER: "bob-id", CHAT: "chat-2"}) == "41"  # one user, one session: as before
    assert [folder.split("-")[0] for folder, _ in server.state.apps.users()] == ["default"]


def test_a_header_value_too_long_is_refused(live):
    server = live(llm=ScriptedLLM([]), **HEADERS)
    response = httpx.post(server.url + "/chat/completions", headers={**server.auth, USER: "x" * (MAX_HEADER_CHARS + 1)},
                          json={"model": "tool-hub", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and "header" in response.json()["error"]["message"]
    assert "serve_user_header" not in response.json()["error"]["message"]  # the log names it


def test_end_user_maps_header_values_to_safe_names_within_the_key():
    base = User("k1", "default")
    found = end_user(base, {USER: "../../etc/passwd", CHAT: "chat 1/.."}, USER, CHAT, credentialed=True)
    assert found.key_id == "k1" and found.name == "../../etc/passwd" and found.session == "chat 1/.."
    assert "/" not in found.folder and not found.folder.startswith(".")
    assert found.session_id.startswith(f"user-{found.folder}-chat-") and "/" not in found.session_id
    assert " " not in found.session_id
    other_chat = end_user(base, {USER: "../../etc/passwd", CHAT: "chat-2"}, USER, CHAT, credentialed=True)
    assert other_chat == found and other_chat.folder == found.folder and other_chat.session_id != found.session_id
    assert end_user(base, {USER: "alice"}, USER, CHAT, credentialed=False) is base  # no key, no token: ignored
    assert end_user(base, {}, USER, CHAT, credentialed=True) is base  # no header: the key's own user
    assert end_user(base, {USER: "alice"}, "", "", credentialed=True) is base  # settings off
    assert User("k1", "alice").session_id == f"user-{User('k1', 'alice').folder}"  # as before without a chat
    with pytest.raises(ApiError) as err:
        end_user(base, {USER: "alice\x00bob"}, USER, CHAT, credentialed=True)
    assert err.value.status == 400 and "printable" in err.value.message


def test_identity_headers_need_a_credential_and_a_plain_header_name():
    with pytest.raises(ConfigError) as err:
        ServeSettings.from_config({"serve_user_header": USER, "serve_local_token": "off"})
    assert err.value.key == "serve_user_header" and "serve_api_keys" in str(err.value)
    for bad in ("Authorization", "X User", "cookie"):
        with pytest.raises(ConfigError):
            ServeSettings.from_config({"serve_user_header": bad})
    settings = ServeSettings.from_config({"serve_user_header": USER, "serve_api_keys": "k"})
    assert settings.user_header == USER and settings.session_header == ""

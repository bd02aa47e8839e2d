"""JARVIS's own clients against ``tool-hub serve``: the README's request, its web client's requests, CORS.

The planner's LLM is ``ScriptedLLM``; the tools are small fakes of the three
experts of the README's example (a pose detector, a captioner, a pose-to-image
generator) that write real PNG files into the user's workspace.

* The README (microsoft/JARVIS ``hugginggpt/README.md``, "For Server") asks
  ``curl --location 'http://localhost:8004/tasks' --header 'Content-Type:
  application/json' --data '{"messages": [{"role": "user", "content": "based on
  pose of /examples/d.jpg and content of /examples/e.jpg, please show me a new
  image"}]}'`` and shows the plan it answers. The same request is sent here with
  ``requests`` (no key, no other header), the two files in a temporary folder.
* JARVIS's web client (``hugginggpt/web/src/api/hugginggpt.ts``) POSTs
  ``${HUGGINGGPT_BASE_URL}/hugginggpt`` with ``Content-Type: application/json``
  and ``{"model": "gpt-3.5-turbo", "messages": messageList.slice(1)}``, no
  ``Authorization``, and reads ``response.data.message``; its chat view
  (under ``hugginggpt/web/src/views/``, the ``messageListMM`` list) finds image paths
  with ``/(http(s?):|\\/)([/|.|\\S||\\w|:|-])*?\\.(?:jpg|jpeg|tiff|gif|png)/g`` and
  shows ``<img src=HUGGINGGPT_BASE_URL + path>`` for a path that does not start
  with ``http``. The browser test replays exactly that from a page of another
  127.0.0.1 origin (the web client's own server), in headless Chromium.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import requests
from test_server_support import Live, free_port, live  # noqa: F401 - the fixture

from chatgpt_tool_hub.server.jarvis import JARVIS_USER
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool

README_PLAN = [  # the response the README shows, with the request's two files
    {"args": {"image": "{d}"}, "dep": [-1], "id": 0, "task": "openpose-control"},
    {"args": {"image": "{e}"}, "dep": [-1], "id": 1, "task": "image-to-text"},
    {"args": {"image": "<GENERATED>-0", "text": "<GENERATED>-1"}, "dep": [1, 0], "id": 2,
     "task": "openpose-text-to-image"},
]
ANSWER = "I drew the dancer in a new scene: image/new_pose.png"
WEB_ORIGIN_HOST = "127.0.0.1"


def _png(path: Path, color: tuple[int, int, int]) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (6, 4), color).save(path, "PNG")


class _Expert(Tool):
    """A fake expert of the README's plan; its workspace is the ``jarvis`` user's folder."""

    def __init__(self, name: str, kind: str, params: dict, workspace: Path, run: Any):
        self.name, self.output_kind, self.workspace, self._do = name, kind, workspace, run
        self.description = f"{name} (a test expert)"
        self.parameters = {"type": "object", "properties": {k: {"type": "string"} for k in params},
                           "required": list(params)}

    def _run(self, **kwargs: Any) -> str:
        return self._do(**kwargs)


def readme_tools(workspace: Path) -> list[Tool]:
    def pose(image: str) -> str:
        _png(workspace / "image" / "pose_of_d.png", (0, 0, 255))
        return "image/pose_of_d.png"

    def caption(image: str) -> str:
        return "a person dancing"

    def draw(image: str, text: str) -> str:
        _png(workspace / "image" / "new_pose.png", (0, 200, 0))
        return "Saved the image to image/new_pose.png"

    return [_Expert("image-to-pose", "image", {"image": 1}, workspace, pose),
            _Expert("image-captioning", "text", {"image": 1}, workspace, caption),
            _Expert("pose-to-image", "image", {"image": 1, "text": 1}, workspace, draw)]


def jarvis_server(live, tmp_path: Path, replies: list, **settings: Any) -> tuple[Live, ScriptedLLM, str, Path]:
    root = tmp_path / "users"
    workspace = root / JARVIS_USER.folder
    # in the JARVIS user's own workspace: a server's planner reads no file outside it (planner_request_files)
    d, e = workspace / "examples" / "d.jpg", workspace / "examples" / "e.jpg"
    _png(d, (255, 0, 0))
    _png(e, (255, 255, 0))
    plan = json.dumps(README_PLAN).replace("{d}", str(d)).replace("{e}", str(e))
    llm = ScriptedLLM([plan if r == "plan" else r for r in replies])
    settings.setdefault("serve_jarvis_keyless", True)
    server = live(llm=llm, tools_list=readme_tools(workspace), serve_workspace_root=str(root), **settings)
    question = f"based on pose of {d} and content of {e}, please show me a new image"
    return server, llm, question, workspace


def curl(server: Live, route: str, content: str, **headers: str) -> requests.Response:
    """The README's curl: ``--location``, ``Content-Type: application/json``, the body as written."""
    body = json.dumps({"messages": [{"role": "user", "content": content}]})
    return requests.post(server.root + route, data=body, headers={"Content-Type": "application/json", **headers},
                         allow_redirects=True, timeout=60)


# ---- the README's request ---------------------------------------------------------------------------


def test_tasks_answers_the_readme_plan_with_jarvis_names_and_the_same_args_every_time(live, tmp_path):
    server, llm, question, _ = jarvis_server(live, tmp_path, ["plan", "plan"])
    first = curl(server, "/tasks", question)
    assert first.status_code == 200, first.text
    workspace = tmp_path / "users" / JARVIS_USER.folder
    files = {"{d}": str(workspace / "examples" / "d.jpg"), "{e}": str(workspace / "examples" / "e.jpg")}
    expected = [{**t, "args": {k: files.get(v, v) for k, v in t["args"].items()}} for t in README_PLAN]
    assert first.json() == expected
    assert [t["task"] for t in first.json()] == ["openpose-control", "image-to-text", "openpose-text-to-image"]
    second = curl(server, "/tasks", question)
    assert second.json() == first.json()  # the same request, the same plan: no new file names


def test_results_have_jarvis_keys_and_their_files_load(live, tmp_path):
    server, _, question, workspace = jarvis_server(live, tmp_path, ["plan"])
    reply = curl(server, "/results", question)
    assert reply.status_code == 200, reply.text
    results = reply.json()
    assert set(results) == {"0", "1", "2"}
    assert [results[i]["task"]["task"] for i in "012"] == ["openpose-control", "image-to-text",
                                                          "openpose-text-to-image"]
    assert results["1"]["inference result"] == {"generated text": "a person dancing"}
    for task_id, name in (("0", "image/pose_of_d.png"), ("2", "image/new_pose.png")):
        result = results[task_id]["inference result"]
        assert list(result) == ["generated image"], result
        path = result["generated image"]
        assert path.startswith("/images/") and path.endswith(name)
        image = requests.get(server.root + path, timeout=30)
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        assert image.content == (workspace / name).read_bytes()
    for task in results.values():
        assert set(task) == {"task", "inference result", "choose model result"}
        assert {"id", "reason"} <= set(task["choose model result"])
    assert results["2"]["task"]["args"]["text"] == "a person dancing"
    assert results["2"]["task"]["args"]["image"].startswith("/images/")


def test_hugginggpt_names_the_files_where_the_client_finds_them(live, tmp_path):
    server, _, question, workspace = jarvis_server(live, tmp_path, ["plan", ANSWER])
    reply = curl(server, "/hugginggpt", question)
    assert reply.status_code == 200, reply.text
    message = reply.json()["message"]
    assert message.startswith("I drew the dancer in a new scene: /images/")
    paths = [word for word in message.split() if word.startswith("/images/")]
    assert paths[0].endswith("/image/new_pose.png")
    assert any(p.endswith("/image/pose_of_d.png") for p in paths[1:])  # made, not named: listed after
    for path in paths:
        assert requests.get(server.root + path, timeout=30).status_code == 200
    # the signature is what lets a file out: change it, or point it at another file, and nothing is served
    folder, stamp = paths[0].split("/")[2:4]
    forged = stamp[:-1] + ("0" if stamp[-1] != "0" else "1")
    assert requests.get(f"{server.root}/images/{folder}/{forged}/image/new_pose.png").status_code == 404
    assert requests.get(f"{server.root}/images/{folder}/{stamp}/image/pose_of_d.png").status_code == 404
    assert requests.get(f"{server.root}/audios/{folder}/{stamp}/image/new_pose.png").status_code == 404


def test_without_the_keyless_setting_a_keyed_server_says_which_setting_lets_the_client_in(live, tmp_path):
    server, llm, question, _ = jarvis_server(live, tmp_path, ["plan"], serve_jarvis_keyless=False,
                                             serve_api_keys="server-key")
    reply = curl(server, "/tasks", question)
    assert reply.status_code == 401 and "trusted LAN" in reply.json()["error"]["message"]
    body = json.dumps({"messages": [{"role": "user", "content": question}], "api_key": "server-key"})
    with_body_key = requests.post(server.root + "/tasks", data=body, headers={"Content-Type": "application/json"})
    assert with_body_key.status_code == 401  # a key in the body is JARVIS's OpenAI key, never this server's
    assert llm.requests == []
    keyed = curl(server, "/tasks", question, Authorization="Bearer server-key")
    assert keyed.status_code == 200 and keyed.json()[0]["task"] == "openpose-control"


def test_keyless_lets_a_keyed_servers_jarvis_routes_in_and_nothing_else(live, tmp_path):
    server, _, question, _ = jarvis_server(live, tmp_path, ["plan"], serve_api_keys="server-key")
    reply = curl(server, "/tasks", question)
    assert reply.status_code == 200 and reply.json()[2]["task"] == "openpose-text-to-image"
    assert requests.get(server.url + "/models").status_code == 401
    chat = requests.post(server.url + "/chat/completions", json={
        "model": "tool-hub-planner", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 401


# ---- CORS --------------------------------------------------------------------------------------------


def preflight(server: Live, route: str, origin: str) -> requests.Response:
    return requests.options(server.root + route, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})


def test_cors_for_the_listed_origins_on_the_jarvis_routes_only(live, tmp_path):
    lan = "http://192.168.1.5:9999"
    server, llm, question, _ = jarvis_server(live, tmp_path, ["plan", "plan"],
                                             serve_jarvis_origins=f"http://localhost:9999,{lan}")
    for route in ("/hugginggpt", "/tasks", "/results"):
        answer = preflight(server, route, lan)
        assert answer.status_code == 204, (route, answer.text)
        assert answer.headers["access-control-allow-origin"] == lan
        assert "POST" in answer.headers["access-control-allow-methods"]
        assert "content-type" in answer.headers["access-control-allow-headers"]
    reply = curl(server, "/tasks", question, Origin=lan)
    assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == lan
    assert reply.json()[0]["task"] == "openpose-control"
    # another origin: no CORS, and its POST runs nothing
    calls = len(llm.requests)
    for origin in ("http://evil.test:9999", "null", "http://192.168.1.6:9999"):
        refused = preflight(server, "/tasks", origin)
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers, origin
        posted = curl(server, "/tasks", question, Origin=origin)
        assert posted.status_code == 403 and "access-control-allow-origin" not in posted.headers, origin
    assert len(llm.requests) == calls
    # other routes are as they were: no CORS, the origin check and the keys as before
    assert "access-control-allow-origin" not in preflight(server, "/v1/chat/completions", lan).headers
    chat = requests.post(server.url + "/chat/completions", headers={"Origin": lan}, json={
        "model": "tool-hub", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 403 and "access-control-allow-origin" not in chat.headers
    assert requests.get(server.url + "/models", headers={"Origin": lan}).status_code == 401


def test_star_answers_any_origin_and_no_list_answers_none(live, tmp_path):
    server, _, question, _ = jarvis_server(live, tmp_path, ["plan"], serve_jarvis_origins="*")
    answer = preflight(server, "/tasks", "http://10.0.0.7:9999")
    assert answer.status_code == 204 and answer.headers["access-control-allow-origin"] == "*"
    assert curl(server, "/tasks", question, Origin="http://10.0.0.7:9999").status_code == 200
    plain, _, _, _ = jarvis_server(live, tmp_path / "plain", [])
    assert "access-control-allow-origin" not in preflight(plain, "/tasks", "http://localhost:9999").headers


# ---- JARVIS's web client in a browser -----------------------------------------------------------------

CLIENT_PAGE = """<!doctype html><meta charset="utf-8"><title>client</title><div id="chat"></div>
<script>
// the request of hugginggpt/web/src/api/hugginggpt.ts and the image rendering of its chat view
const HUGGINGGPT_BASE_URL = "%(base)s";
function hugginggpt(messageList) {
  return new Promise((resolve) => {
    const xhr = new XMLHttpRequest();                    // axios' browser adapter
    xhr.open("POST", `${HUGGINGGPT_BASE_URL}/hugginggpt`);
    xhr.setRequestHeader("Accept", "application/json, text/plain, */*");
    xhr.setRequestHeader("Content-Type", "application/json");
    xhr.timeout = 180000;
    xhr.onload = () => resolve(xhr.status >= 200 && xhr.status < 300
      ? {status: "success", data: JSON.parse(xhr.responseText).message}
      : {status: "error", message: `Request failed with status code ${xhr.status}`});
    xhr.onerror = () => resolve({status: "error", message: "Network Error"});
    xhr.send(JSON.stringify({model: "gpt-3.5-turbo", messages: messageList.slice(1)}));
  });
}
async function ask(question) {
  const messageList = [{role: "assistant", content: "Hi there! I am HuggingGPT."}, {role: "user", content: question}];
  const {status, data, message} = await hugginggpt(messageList);
  window.outcome = {status, data, message};
  if (status !== "success") return;
  const urls = data.match(/(http(s?):|\\/)([/|.|\\S||\\w|:|-])*?\\.(?:jpg|jpeg|tiff|gif|png)/g) || [];
  window.images = urls.map((u) => u.startsWith("http") ? u : HUGGINGGPT_BASE_URL + u);
  window.loaded = [];
  for (const src of window.images) {
    const img = document.createElement("img");
    img.onload = () => window.loaded.push([src, img.naturalWidth, img.naturalHeight]);
    img.onerror = () => window.loaded.push([src, 0, 0]);
    img.src = src;
    document.getElementById("chat").appendChild(img);
  }
}
</script>"""


class _Page(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.browser
def test_the_web_clients_request_and_image_work_from_its_own_origin(live, tmp_path):
    from test_web_browser import headless_chrome, wait

    web_port = free_port()
    origin = f"http://{WEB_ORIGIN_HOST}:{web_port}"
    server, _, question, workspace = jarvis_server(live, tmp_path, ["plan", ANSWER], serve_jarvis_origins=origin)
    handler = type("Page", (_Page,), {"body": (CLIENT_PAGE % {"base": server.root}).encode()})
    site = http.server.ThreadingHTTPServer((WEB_ORIGIN_HOST, web_port), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    driver = headless_chrome()
    try:
        driver.get(origin + "/")
        driver.execute_script("ask(arguments[0])", question)
        wait(driver, lambda d: d.execute_script("return window.outcome || null"), 60)
        outcome = driver.execute_script("return window.outcome")
        assert outcome["status"] == "success", outcome
        assert "/images/" in outcome["data"]
        wait(driver, lambda d: d.execute_script(
            "return window.loaded && window.loaded.length === window.images.length"), 30)
        loaded = driver.execute_script("return window.loaded")
        shown = {src.rsplit("/", 1)[-1]: (width, height) for src, width, height in loaded}
        assert shown.get("new_pose.png") == (6, 4), loaded  # the image the answer names, decoded
        assert all(size == (6, 4) for size in shown.values()), loaded
    finally:
        driver.quit()
        site.shutdown()
        site.server_close()

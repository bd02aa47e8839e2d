"""Files through the server: images in (data URIs, http URLs through the SSRF guard), files the tools
write out as signed links, users kept apart (files, python variables), and two replicas sharing one
workspace root continuing one conversation."""

from __future__ import annotations

import base64
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from test_server_support import live, png_bytes, user_workspace  # noqa: F401 - the fixture

from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

pytest.importorskip("PIL")

_NAME = re.compile(r"image/[0-9a-f]{8}\.png")


def _image_message(url: str, text: str = "What is in this picture?") -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": url}}]}


def _data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_an_image_in_the_question_is_handed_to_the_app(live):
    llm = ScriptedLLM([lambda messages: answer("saw " + _NAME.search(messages[-3]["content"]).group(0))])
    server = live(llm=llm)
    reply = server.client().chat.completions.create(model="tool-hub", messages=[_image_message(_data_uri(png_bytes()))])
    name = _NAME.search(reply.choices[0].message.content).group(0)
    assert f"![{name}](http://127.0.0.1:" in reply.choices[0].message.content  # a file the answer names: linked
    sent = llm.requests[0]
    assert sent[-3]["role"] == "user" and name in sent[-3]["content"] and "never imagine" in sent[-3]["content"]
    assert sent[-2] == {"role": "assistant", "content": "Received."}
    assert sent[-1] == {"role": "user", "content": "What is in this picture?"}
    assert (user_workspace(server) / name).read_bytes()[:4] == b"\x89PNG"


def test_an_image_sent_again_in_the_history_is_one_file_named_in_its_message(live):
    llm = ScriptedLLM([answer("a red square"), answer("still red")])
    server = live(llm=llm)
    image = _image_message(_data_uri(png_bytes()))
    client = server.client()
    client.chat.completions.create(model="tool-hub", messages=[image])
    client.chat.completions.create(model="tool-hub", messages=[
        image, {"role": "assistant", "content": "a red square"}, {"role": "user", "content": "and its colour?"}])
    files = sorted(p.name for p in (user_workspace(server) / "image").iterdir())
    assert len(files) == 1
    history = llm.requests[1][1]
    assert history["role"] == "user" and f"[image: image/{files[0]}]" in history["content"]


class _Images(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/red.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = png_bytes((0, 0, 255))
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def image_host():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_an_http_image_is_fetched_through_the_guard(live, image_host):
    llm = ScriptedLLM([answer("blue")])
    server = live(llm=llm, url_get_allow_private=True)  # the test's image host is on 127.0.0.1
    server.client().chat.completions.create(model="tool-hub", messages=[_image_message(image_host + "/moved")])
    name = _NAME.search(llm.requests[0][-3]["content"]).group(0)
    assert (user_workspace(server) / name).is_file()


def test_an_image_on_a_private_address_is_refused_by_default(live, image_host):
    llm = ScriptedLLM([answer("never")])
    server = live(llm=llm)
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(model="tool-hub", messages=[_image_message(image_host + "/red.png")])
    assert "not fetched" in str(err.value) and llm.calls == 0


@pytest.mark.parametrize("url, words", [("data:image/png;base64,bm90IGFuIGltYWdl", "could not be read"),
                                        ("ftp://example.test/a.png", "data: URI or an http(s) URL")])
def test_bad_images_are_400(live, url, words):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(model="tool-hub", messages=[_image_message(url)])
    assert words in str(err.value)


WRITE_REPORT = "open('report.txt', 'w').write('the report')\nprint('wrote report.txt')"


def test_files_the_tools_write_come_back_as_signed_links(live):
    llm = ScriptedLLM([act("python", WRITE_REPORT), answer("I saved it as report.txt.")])
    server = live(llm=llm, tools_list=["python"])
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": "go"}])
    content = reply.choices[0].message.content
    files = reply.model_extra["tool_hub"]["files"]
    assert [f["name"] for f in files] == ["report.txt"] and f"[report.txt]({files[0]['url']})" in content
    download = httpx.get(files[0]["url"])
    assert download.status_code == 200 and download.text == "the report"
    parts = urlsplit(files[0]["url"])
    tampered = f"{server.root}{parts.path}?sig={'0' * 32}"
    assert httpx.get(tampered).status_code == 404
    unsigned = f"{server.root}{parts.path}"
    assert httpx.get(unsigned).status_code == 404
    escape = f"{server.root}{parts.path.rsplit('/', 1)[0]}/../../secret.txt?{parts.query}"
    assert httpx.get(escape).status_code in (401, 404)  # the client resolves the dots: not a /files route


def test_links_never_serve_a_page_a_users_code_wrote_nor_another_users_file(live):
    code = ("import os\n"
            "open('page.html', 'w').write('<script>fetch(\"/config\")</script>')\n"
            "open('pic.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"/>')\n"
            "open('plot.png', 'wb').write(b'\\x89PNG\\r\\n')\n"
            "open('other.txt', 'w').write('not yours')\n"
            "os.link('other.txt', 'linked.txt')\n"
            "print('page.html pic.svg plot.png linked.txt')")
    llm = ScriptedLLM([act("python", code), answer("see page.html, pic.svg, plot.png and linked.txt")])
    server = live(llm=llm, tools_list=["python"])
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": "go"}])
    urls = {f["name"]: f["url"] for f in reply.model_extra["tool_hub"]["files"]}
    for name in ("page.html", "pic.svg"):  # a download, never a page of this origin
        got = httpx.get(urls[name])
        assert got.headers["content-type"] == "application/octet-stream", name
        assert got.headers["content-disposition"].startswith("attachment") and "sandbox" in got.headers[
            "content-security-policy"] and got.headers["x-content-type-options"] == "nosniff"
    image = httpx.get(urls["plot.png"])
    assert image.headers["content-type"] == "image/png" and "content-disposition" not in image.headers
    from chatgpt_tool_hub.server.files import sign

    folder = urlsplit(urls["plot.png"]).path.split("/")[2]
    linked = f"{server.root}/files/{folder}/linked.txt?sig={sign(server.app.state.tool_hub.settings.link_secret, folder, 'linked.txt')}"
    assert httpx.get(linked).status_code == 404  # a hard link may name another user's file


def test_json_nested_too_deeply_is_a_400_in_openais_shape(live):
    server = live(llm=ScriptedLLM([]), tools_list=[])
    for route in ("/v1/chat/completions", "/tasks"):
        reply = httpx.post(server.root + route, content=b"[" * 90_000 + b"]" * 90_000,
                           headers={"content-type": "application/json", **server.auth})
        assert reply.status_code == 400 and "nested too deeply" in reply.json()["error"]["message"]


def test_streamed_answers_end_with_the_links(live):
    llm = ScriptedLLM([act("python", WRITE_REPORT), answer("Done: report.txt")])
    server = live(llm=llm, tools_list=["python"])
    stream = server.client().chat.completions.create(model="tool-hub", stream=True,
                                                     messages=[{"role": "user", "content": "go"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("Done: report.txt\n\n[report.txt](http://127.0.0.1:")
    link = re.search(r"\((http://[^)]+)\)", text).group(1)
    assert httpx.get(link).text == "the report"


def test_two_users_never_see_each_others_files_or_variables(live):
    llm = ScriptedLLM([act("python", "secret = 41\nopen('mine.txt', 'w').write('alice')"), answer("stored"),
                       act("python", "print(secret)"), answer("bob asked"),
                       act("python", "import os\nprint(sorted(os.listdir('.')))"), answer("bob listed"),
                       act("python", "print(secret + 1)"), answer("alice again")])
    server = live(llm=llm, tools_list=["python"], serve_api_keys="key-a,key-b", serve_shared_trust=True)
    alice, bob = server.client("key-a"), server.client("key-b")
    question = [{"role": "user", "content": "go"}]
    alice.chat.completions.create(model="tool-hub", messages=question, user="alice")
    bob.chat.completions.create(model="tool-hub", messages=question, user="alice")  # another key: another user
    bob.chat.completions.create(model="tool-hub", messages=question, user="alice")
    alice.chat.completions.create(model="tool-hub", messages=question, user="alice")
    observations = [request[-1]["content"] for request in llm.requests[1::2]]
    assert "NameError" in observations[1]                   # bob has no variable of alice's
    assert "mine.txt" not in observations[2]                 # nor her files
    assert observations[3].endswith("42")                    # alice's session kept hers
    alice_ws = user_workspace(server, "alice", "key-a")
    bob_ws = user_workspace(server, "alice", "key-b")
    assert alice_ws != bob_ws and (alice_ws / "mine.txt").is_file() and not (bob_ws / "mine.txt").exists()


def test_a_conversation_continues_across_two_replicas_sharing_the_workspace_root(live, tmp_path):
    root = str(tmp_path / "shared-volume")
    first = live(llm=ScriptedLLM([act("python", "open('notes.txt', 'w').write('step one done')"),
                                  answer("Saved notes.txt.")]), tools_list=["python"], serve_workspace_root=root,
                 serve_api_keys="k")
    second_llm = ScriptedLLM([act("python", "print(open('notes.txt').read())"), answer("It says: step one done")])
    second = live(llm=second_llm, tools_list=["python"], serve_workspace_root=root, serve_api_keys="k")
    messages = [{"role": "user", "content": "write a note"}]
    reply = first.client("k").chat.completions.create(model="tool-hub", messages=messages, user="carol")
    link = urlsplit(reply.model_extra["tool_hub"]["files"][0]["url"])
    messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                 {"role": "user", "content": "what does the note say?"}]
    reply = second.client("k").chat.completions.create(model="tool-hub", messages=messages, user="carol")
    assert reply.choices[0].message.content.startswith("It says: step one done")
    assert second_llm.requests[0][1]["content"] == "write a note"  # the history came with the request
    assert second_llm.requests[1][-1]["content"].endswith("step one done")
    # a link one replica signed is served by the other
    assert httpx.get(f"{second.root}{link.path}?{link.query}").text == "step one done"


# ---- images decoded in a child, within a pixel budget, a deadline and a cancel -----------------------


def _chat_with_images(*datas: bytes):
    from chatgpt_tool_hub.server.chat import parse_request

    content = [{"type": "text", "text": "what is in these?"}]
    content += [{"type": "image_url", "image_url": {"url": _data_uri(data)}} for data in datas]
    return parse_request({"model": "tool-hub", "messages": [{"role": "user", "content": content}]},
                         {"tool-hub": "victorinox"})


def test_the_images_of_a_request_share_one_pixel_budget(tmp_path):
    from chatgpt_tool_hub.server.asgi import ApiError
    from chatgpt_tool_hub.server.chat import prepare_images

    red, blue = png_bytes((255, 0, 0), (100, 100)), png_bytes((0, 0, 255), (100, 100))
    handed = prepare_images(_chat_with_images(red, red, blue), tmp_path, max_bytes=10_000_000, allow_private=False,
                            max_pixels=20_000)  # the same image twice is decoded once
    assert {kind for kind, _ in handed} == {"image"}
    names = [name for _, name in handed]
    assert len(names) == 3 and names[0] == names[1] and all(_NAME.fullmatch(n) for n in names)
    with pytest.raises(ApiError) as refused:
        prepare_images(_chat_with_images(png_bytes((0, 255, 0), (100, 100)), png_bytes((9, 9, 9), (100, 150))),
                       tmp_path, max_bytes=10_000_000, allow_private=False, max_pixels=20_000)
    assert refused.value.status == 400 and "serve_max_image_pixels" in refused.value.message
    assert "100x150 pixels" in refused.value.message


def test_a_decompression_bomb_in_a_request_is_refused_before_it_is_decoded(tmp_path):
    from test_contained import bomb_png

    from chatgpt_tool_hub.server.asgi import ApiError
    from chatgpt_tool_hub.server.chat import prepare_images

    bomb = bomb_png(6000, 6000)  # a small file, 36 megapixels
    with pytest.raises(ApiError) as refused:
        prepare_images(_chat_with_images(bomb), tmp_path, max_bytes=10_000_000, allow_private=False,
                       max_pixels=10_000_000)
    assert refused.value.status == 400 and "6000x6000 pixels" in refused.value.message
    assert not list((tmp_path / "image").glob("*"))


def test_a_cancelled_or_late_request_stops_reading_its_images(tmp_path):
    import time

    from chatgpt_tool_hub.runtime.contained import Cancellation
    from chatgpt_tool_hub.server.asgi import ApiError
    from chatgpt_tool_hub.server.chat import prepare_images

    cancelled = Cancellation()
    cancelled.cancel()
    with pytest.raises(ApiError) as stopped:
        prepare_images(_chat_with_images(png_bytes()), tmp_path, max_bytes=10_000_000, allow_private=False,
                       cancellation=cancelled)
    assert stopped.value.status == 499
    with pytest.raises(ApiError) as late:
        prepare_images(_chat_with_images(png_bytes()), tmp_path, max_bytes=10_000_000, allow_private=False,
                       deadline=time.monotonic() - 1)
    assert late.value.status == 504 and "serve_request_timeout_s" in late.value.message

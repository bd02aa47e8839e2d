"""The bytes of a streamed answer: each delta's event encoded from a template made once per answer, the
deltas of one run event sent in one write, and every event whole and valid JSON."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.server.asgi import sse
from chatgpt_tool_hub.server.chat import DeltaEvents
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

TEXTS = ["plain", "", 'quotes " and \\ backslashes', "line\nbreaks\r\tand tabs", "中文 and émojis 🎉",
         "\u2028\u2029 separators", "</script>", "\x00\x1f controls"]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("field", ["content", "reasoning"])
def test_a_delta_event_is_the_bytes_the_chunk_dict_makes(text, field):
    cid, created, model = "chatcmpl-abc123", 1712345678, 'my "model"'
    chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
             "choices": [{"index": 0, "delta": {"reasoning_content" if field == "reasoning" else "content": text},
                          "finish_reason": None}]}
    assert DeltaEvents(cid, created, model).encode([(field, text)]) == sse(chunk)


def test_several_deltas_are_their_events_back_to_back():
    events = DeltaEvents("c", 1, "m")
    both = events.encode([("reasoning", "a"), ("content", "b")])
    assert both == events.encode([("reasoning", "a")]) + events.encode([("content", "b")])
    assert events.encode([]) == b""


def test_the_raw_stream_is_whole_events_in_order(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("The answer is 42.")], chunk_size=3)
    server = live(llm=llm, tools_list=["python"])
    writes: list[bytes] = []
    with httpx.Client(timeout=60, headers=server.auth) as client:
        with client.stream("POST", server.url + "/chat/completions", json={
                "model": "tool-hub", "stream": True, "messages": [{"role": "user", "content": "6 * 7?"}]}) as reply:
            assert reply.headers["content-type"].startswith("text/event-stream")
            for piece in reply.iter_raw():
                writes.append(piece)
    body = b"".join(writes)
    assert body.endswith(b"data: [DONE]\n\n")
    events = [e for e in body.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    deltas = [p["choices"][0]["delta"] for p in payloads if p.get("choices")]
    content = "".join(d.get("content") or "" for d in deltas)
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert content == "The answer is 42." and "Observation:\n\n```\n42\n```" in reasoning
    assert len({p["id"] for p in payloads}) == 1 and payloads[-1]["choices"][0]["finish_reason"] == "stop"


def test_tool_hub_serve_collects_garbage_less_often_and_leaves_a_disabled_collector_alone(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import gc, uvicorn\n"
            "from chatgpt_tool_hub.server import cli\n"
            "before = gc.get_threshold()\n"
            "uvicorn.Server.run = lambda self, *a, **k: print(before, gc.get_threshold())\n"  # no real serving
            "cli.main(['--port', '8'])\n"
            "gc.set_threshold(0)\n"
            "cli.collect_less_often()\n"
            "print(gc.get_threshold())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_", "SERVE_", "MODEL_"))}
    env.update(PYTHONPATH=str(root), LLM_API_BASE_URL="http://127.0.0.1:9/v1", NO_DEFAULT="true",
               SERVE_WORKSPACE_ROOT=str(tmp_path / "users"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=env)
    assert out.returncode == 0, out.stderr
    served, disabled = out.stdout.strip().splitlines()[-2:]
    assert served == "(700, 10, 10) (20000, 10, 10)"  # Python's default, then the server's
    assert disabled == "(0, 10, 10)"


# --- the body of a stream: writes made in one go are one send ---------------------------------------


class Sends:
    def __init__(self, fail_at: int | None = None, gate: "asyncio.Event | None" = None):
        self.messages: list[dict] = []
        self.fail_at, self.gate = fail_at, gate

    async def __call__(self, message: dict) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_at is not None and len(self.messages) == self.fail_at:
            raise OSError("the client went away")
        self.messages.append(message)

    @property
    def bodies(self) -> list[tuple[bytes, bool]]:
        return [(m["body"], m["more_body"]) for m in self.messages]


def test_writes_made_in_one_go_are_one_send_and_the_end_takes_what_is_left():
    from chatgpt_tool_hub.server.asgi import StreamBody

    async def main():
        sends = Sends()
        body = StreamBody(sends)
        for part in (b"a", b"b", b"c"):
            await body.write(part)
        assert sends.messages == []  # nothing is sent before the writer waits
        await asyncio.sleep(0)  # the writer waits (for the next tokens): what it wrote goes out
        await asyncio.sleep(0)
        await body.write(b"d")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await body.write(b"e")
        await body.write(b"f")
        await body.close()
        return sends.bodies

    assert asyncio.run(main()) == [(b"abc", True), (b"d", True), (b"ef", False)]


def test_a_send_that_failed_is_raised_by_the_next_write():
    from chatgpt_tool_hub.server.asgi import StreamBody

    async def main():
        body = StreamBody(Sends(fail_at=0))
        await body.write(b"a")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        with pytest.raises(OSError, match="went away"):
            await body.write(b"b")

    asyncio.run(main())


def test_past_the_limit_a_write_waits_for_the_client_and_abort_drops_the_rest():
    from chatgpt_tool_hub.server.asgi import StreamBody

    async def main():
        gate = asyncio.Event()
        sends = Sends(gate=gate)
        body = StreamBody(sends, limit=4)
        await body.write(b"12")
        blocked = asyncio.ensure_future(body.write(b"345"))  # 5 bytes queued: past the limit
        await asyncio.sleep(0.05)
        assert not blocked.done()  # the client has not taken anything yet
        gate.set()
        await blocked  # it returns once the client took both: the one being sent, then the one queued
        assert sends.bodies == [(b"12", True), (b"345", True)]
        await body.write(b"x")  # queued, not sent yet
        body.abort()
        await asyncio.sleep(0.01)
        return sends.bodies

    assert asyncio.run(main()) == [(b"12", True), (b"345", True)]


def _chunked_body(port: int, payload: dict, token: str) -> list[bytes]:
    """POST ``payload`` over a raw socket; the HTTP chunks of the answer, as the server framed them."""
    import socket

    data = json.dumps(payload).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"authorization: Bearer %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                     % (token.encode(), len(data), data))
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    chunks = []
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        size = int(size, 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        rest = rest[size + 2:]
    return chunks


def test_what_the_run_makes_in_one_go_is_one_write(live):
    reply = "Thought: Do I need to use a tool? No\nAI: " + " ".join(f"word{i}" for i in range(30))
    server = live(llm=ScriptedLLM([reply], chunk_size=1))  # 60 token events, made without a wait between them
    chunks = _chunked_body(server.port, {"model": "tool-hub", "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]}, server.token)
    events = [e for e in b"".join(chunks).split(b"\n\n") if e]
    assert len(events) > 30 and events[-1] == b"data: [DONE]"
    assert len(chunks) <= len(events) // 4  # not one write per event
    assert all(chunk.endswith(b"\n\n") for chunk in chunks)  # each write is whole events

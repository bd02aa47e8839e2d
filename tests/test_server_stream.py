"""The bytes of a streamed answer: each delta's event encoded from a template made once per answer, the
deltas of one run event sent in one write, and every event whole and valid JSON."""

from __future__ import annotations

import json

import httpx
import pytest

from chatgpt_tool_hub.server.asgi import sse
from chatgpt_tool_hub.server.chat import DeltaEvents
from chatgpt_tool_hub.testing import ScriptedLLM
from helpers import act, answer
from test_server_support import live  # noqa: F401 - the fixture

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


def test_the_raw_stream_is_whole_events_and_each_body_write_ends_on_an_event(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("The answer is 42.")], chunk_size=3)
    server = live(llm=llm, tools_list=["python"])
    writes: list[bytes] = []
    with httpx.Client(timeout=60) as client:
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
    assert content == "The answer is 42." and "Observation: 42" in reasoning
    assert len({p["id"] for p in payloads}) == 1 and payloads[-1]["choices"][0]["finish_reason"] == "stop"

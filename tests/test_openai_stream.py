"""Streams read raw: the server-sent events' payloads parsed as JSON (``llm/openai_stream.py``), with the
``openai`` package's behaviour kept (error events, transport errors, retries before the first chunk), and
the connection handed back to the pool after ``[DONE]``."""

from __future__ import annotations

import asyncio
import json
import socketserver
import threading

import pytest

from chatgpt_tool_hub.errors import LLMConnectionError
from chatgpt_tool_hub.llm import collect_stream
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from chatgpt_tool_hub.llm.openai_stream import SSEPayloads

from helpers import read_http_request

MSGS = [{"role": "user", "content": "hi"}]


def chunk(text: str = "", finish: str | None = None, **extra) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}], **extra}


def event(payload, end: bytes = b"\n") -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return b"data: " + data.encode() + end + end


# --- the decoder ---------------------------------------------------------------------------------


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_events_split_anywhere_come_out_whole_with_every_line_ending(end):
    stream = event(chunk("one "), end) + event(chunk("two"), end) + event("[DONE]", end)
    for size in (1, 2, 7, len(stream)):
        reader = SSEPayloads()
        got = [p for i in range(0, len(stream), size) for p in reader.feed(stream[i:i + size])]
        assert [p["choices"][0]["delta"]["content"] for p in got] == ["one ", "two"], size
        assert reader.done


def test_multi_line_data_comments_other_fields_and_no_space_after_the_colon():
    reader = SSEPayloads()
    raw = (b": a comment\nevent: message\nid: 7\nretry: 10\ndata:{\"a\":\ndata: 1}\n\n"
           b"data\n\n" b"data: {\"b\": 2}\n\n")
    with pytest.raises(json.JSONDecodeError):  # the bare ``data`` line is an event with empty data
        reader.feed(raw)
    reader = SSEPayloads()
    assert reader.feed(raw.replace(b"data\n\n", b"")) == [{"a": 1}, {"b": 2}]


def test_done_ends_the_stream_and_what_follows_is_ignored():
    reader = SSEPayloads()
    assert reader.feed(event(chunk("x")) + b"data: [DONE]\n\n" + event(chunk("after"))) == [chunk("x")]
    assert reader.done and reader.feed(event(chunk("later"))) == []


def test_an_event_without_its_blank_line_at_the_end_is_dropped():
    reader = SSEPayloads()
    assert reader.feed(b'data: {"a": 1}\n') == []


# --- a raw HTTP/1.1 server: scripted bodies, keep-alive, connections counted -------------------------


class RawServer(socketserver.ThreadingTCPServer):
    """Answers each POST with the next scripted SSE body (a list of byte strings, one HTTP chunk each);
    ``hold`` (or the next of ``holds``) keeps a response open that long after its last scripted chunk;
    while ``gate`` is clear, responses wait before they start. Counts connections and requests."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # many clients connect at once

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[list[bytes]] = []
        self.hold = 0.0
        self.holds: list[float] = []
        self.connections = 0
        self.requests = 0
        self.released = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def close(self) -> None:
        self.released.set()
        self.gate.set()
        self.shutdown()
        self.server_close()


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: RawServer = self.server  # type: ignore[assignment]
        server.connections += 1
        while True:
            request = read_http_request(self.rfile)
            if request is None:
                return
            head = request[0]
            if head.startswith(b"GET "):  # the client asking which server this is: not one of the streams
                self.wfile.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                self.wfile.flush()
                continue
            server.requests += 1
            server.gate.wait(30)
            parts = server.bodies.pop(0) if server.bodies else [event(chunk("OK", "stop")), event("[DONE]")]
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
            for part in parts:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            hold = server.holds.pop(0) if server.holds else server.hold
            if hold:
                server.released.wait(hold)
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                return


@pytest.fixture
def raw():
    server = RawServer()
    yield server
    server.close()


def llm_for(server: RawServer, **kw) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("m", api_key="k", base_url=server.url, backoff_base=0.0,
                               max_retries=kw.pop("retries", 2), timeout=kw.pop("timeout", 20), **kw)


async def acollect(llm, messages=MSGS):
    return collect_stream([piece async for piece in llm.astream(messages)])


def both(llm):
    """The sync and the async stream's collected response, one after the other."""
    return collect_stream(llm.stream(MSGS)), asyncio.run(acollect(llm))


def test_an_error_event_before_the_first_chunk_is_retried_on_both_paths(raw):
    error = {"error": {"message": "overloaded, try again", "type": "server_error"}}
    raw.bodies = [[event(error)], [event(chunk("fine", "stop")), event("[DONE]")]] * 2
    sync, asynchronous = both(llm_for(raw))
    assert sync.text == asynchronous.text == "fine"
    assert raw.requests == 4


@pytest.mark.parametrize("path", ["sync", "async"])
def test_an_error_event_after_the_first_chunk_breaks_the_stream_with_the_servers_message(raw, path):
    raw.bodies = [[event(chunk("partial ")), event({"error": {"message": "the model crashed"}})]]
    llm = llm_for(raw)
    with pytest.raises(LLMConnectionError, match="not retried") as info:
        if path == "sync":
            list(llm.stream(MSGS))
        else:
            asyncio.run(acollect(llm))
    assert "the model crashed" in str(info.value) and raw.requests == 1


def test_carriage_return_line_ends_tool_calls_and_usage_through_the_client(raw):
    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "python", "arguments": '{"in'}}
    rest = {"index": 0, "function": {"arguments": 'put": "1"}'}}
    body = [event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}, b"\r\n"),
            event({"choices": [{"index": 0, "delta": {"tool_calls": [rest]}, "finish_reason": "tool_calls"}]}, b"\r"),
            event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}, b"\r\n"),
            event("[DONE]", b"\r\n")]
    raw.bodies = [body, body]
    for response in both(llm_for(raw)):
        assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("call_9", "python", '{"input": "1"}')]
        assert response.finish_reason == "tool_calls"
        assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.estimated) == (5, 3, False)


def test_the_async_stream_gives_the_connection_back_after_done(raw):
    llm = llm_for(raw)

    async def three():
        return [(await acollect(llm)).text for _ in range(3)]

    assert asyncio.run(three()) == ["OK"] * 3
    assert raw.connections == 1  # the rest of each body was read after [DONE]: one kept-alive connection


def test_done_then_a_body_that_never_ends_does_not_hold_the_answer(raw):
    raw.hold = 30  # the server keeps the response open long after [DONE]
    llm = llm_for(raw, timeout=25)

    async def guarded():
        return await asyncio.wait_for(acollect(llm), 15)  # a hang guard, not a timing check

    assert asyncio.run(guarded()).text == "OK"


def test_a_payload_that_is_not_json_before_the_first_chunk_ends_quietly(raw):
    raw.bodies = [[b"data: <html>oops</html>\n\n"]] * 2
    sync, asynchronous = both(llm_for(raw))
    assert sync.text == asynchronous.text == "" and sync.finish_reason == asynchronous.finish_reason == "error"
    assert raw.requests == 2  # not retried


def test_a_timeout_while_reading_is_retried_before_the_first_chunk(raw):
    raw.holds = [30]  # the first response sends nothing and stays open: its read times out
    raw.bodies = [[], [event(chunk("late but fine", "stop")), event("[DONE]")]]
    llm = llm_for(raw, timeout=0.5, retries=1)
    assert asyncio.run(acollect(llm)).text == "late but fine"
    assert raw.requests == 2


def test_no_typed_objects_are_built_for_completions_or_chunks(monkeypatch, chat_server):
    import openai._base_client as base

    def refuse(*args, **kwargs):
        raise AssertionError("a typed object was built for a response")

    monkeypatch.setattr(base.BaseClient, "_process_response_data", refuse)
    chat_server.replies = ["one two three", "four five", "six", "seven"]
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=chat_server.url, timeout=5)
    assert collect_stream(llm.stream(MSGS)).text == "one two three"
    assert asyncio.run(acollect(llm)).text == "four five"
    assert llm.complete(MSGS).text == "six"
    response = asyncio.run(llm.acomplete(MSGS))
    assert response.text == "seven" and not response.usage.estimated


def test_the_async_stream_reaches_an_azure_deployment(chat_server):
    chat_server.replies = ["streamed azure"]
    llm = OpenAICompatibleLLM("gpt-4o", api_key="k", base_url=chat_server.root, deployment_id="my-dep",
                              azure_api_version="2024-10-21", timeout=5)
    assert asyncio.run(acollect(llm)).text == "streamed azure"
    assert chat_server.requests[0]["path"] == "/openai/deployments/my-dep/chat/completions"
    assert chat_server.requests[0]["query"]["api-version"] == "2024-10-21"


# --- stop strings over a stream --------------------------------------------------------------------


class _ReferenceCutter:
    """What StopCutter computes, written the slow and obvious way."""

    def __init__(self, stops):
        self.stops, self.buffer, self.stopped = [s for s in dict.fromkeys(stops) if s], "", False

    def feed(self, piece):
        if self.stopped or not piece:
            return ""
        self.buffer += piece
        hits = [self.buffer.find(s) for s in self.stops if s in self.buffer]
        if hits:
            self.stopped, out, self.buffer = True, self.buffer[:min(hits)], ""
            return out
        keep = max((k for s in self.stops for k in range(1, len(s)) if self.buffer.endswith(s[:k])), default=0)
        out, self.buffer = self.buffer[:len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
        return out


def test_the_stop_cutter_holds_and_cuts_exactly_as_the_obvious_version():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chatgpt_tool_hub.llm.stops import StopCutter

    alphabet = st.sampled_from(list("ab\\nO:：x") + ["\nObs", "ervation:", "\nObservation："])
    pieces = st.lists(st.text(alphabet=st.sampled_from(list("ab\nO:：xObservation")), max_size=6) | alphabet,
                      max_size=12)
    stops = st.lists(st.text(alphabet=st.sampled_from(list("ab\nO:x")), min_size=1, max_size=5), max_size=3)

    @settings(max_examples=400, deadline=None)
    @given(pieces, st.one_of(st.just(["\nObservation:", "\nObservation："]), stops))
    def check(parts, stop):
        fast, slow = StopCutter(stop), _ReferenceCutter(stop)
        assert [fast.feed(p) for p in parts] == [slow.feed(p) for p in parts]
        assert fast.stopped == slow.stopped
        assert fast.flush() == ("" if slow.stopped else slow.buffer)

    check()

"""A kept-alive connection the LLM server closed: the request that meets it is sent again, once, on a new
connection, by the client's HTTP transport (``llm/http_pools.py``), on the sync and the async path, streamed
or not, and without counting against ``max_retries``. A request that fails on a new connection is not."""

from __future__ import annotations

import asyncio
import json
import socket
import socketserver
import struct
import threading

import pytest

from chatgpt_tool_hub.errors import LLMConnectionError
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM

from helpers import read_http_request

MSGS = [{"role": "user", "content": "hi"}]


class KeepAliveServer(socketserver.ThreadingTCPServer):
    """A chat-completions server that keeps connections alive but, like a server whose keep-alive timeout
    ran out just as the next request came, closes a connection when a request arrives on it after its
    first (``drop="reused"``; ``"first"``: on its first). ``reset``: close with a TCP reset, not a FIN.
    ``together``: hold the answers until that many requests are in flight (so that many connections open).
    Records each chat request as (connection number, request number on it, answered)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # many clients connect at once

    def __init__(self, drop: str | None = "reused", reset: bool = False):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.drop, self.reset = drop, reset
        self.connections = 0
        self.seen: list[tuple[int, int, bool]] = []
        self.together: threading.Barrier | None = None
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def dropped(self) -> int:
        return sum(not answered for _, _, answered in self.seen)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        try:
            self.serve()
        except OSError:  # the client went away
            pass

    def serve(self) -> None:
        server: KeepAliveServer = self.server  # type: ignore[assignment]
        with server.lock:
            server.connections += 1
            number = server.connections
        count = 0
        while True:
            request = read_http_request(self.rfile)
            if request is None:
                return
            head, body = request
            count += 1
            if not head.startswith(b"POST "):  # the client asking which server this is: on a connection of its own
                self.wfile.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                self.wfile.flush()
                return
            drop = (server.drop == "reused" and count > 1) or (server.drop == "first" and count == 1)
            with server.lock:
                server.seen.append((number, count, not drop))
            if drop:
                if server.reset:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                return
            if server.together is not None:
                server.together.wait(10)
            self.answer(json.loads(body))

    def answer(self, request: dict) -> None:
        if not request.get("stream"):
            data = json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                                            "finish_reason": "stop"}]}).encode()
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(data), data))
        else:
            chunk = json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                                "choices": [{"index": 0, "delta": {"content": "OK"}, "finish_reason": "stop"}]})
            data = f"data: {chunk}\n\ndata: [DONE]\n\n".encode()
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(data), data))
        self.wfile.flush()


@pytest.fixture
def server():
    made: list[KeepAliveServer] = []

    def make(**kw) -> KeepAliveServer:
        made.append(KeepAliveServer(**kw))
        return made[-1]

    yield make
    for one in made:
        one.close()


def llm_for(server: KeepAliveServer, retries: int = 0) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("m", api_key="sk-stale-test-0123456789", base_url=server.url, timeout=10,
                               max_retries=retries, backoff_base=0.0)


def streamed(llm: OpenAICompatibleLLM) -> str:
    return "".join(piece.text for piece in llm.stream(MSGS))


async def astreamed(llm: OpenAICompatibleLLM) -> str:
    return "".join([piece.text async for piece in llm.astream(MSGS)])


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_closed_kept_alive_connection_is_retried_on_a_new_one_on_the_async_path(server, reset):
    srv = server(reset=reset)
    llm = llm_for(srv)

    async def main():
        texts = [(await llm.acomplete(MSGS)).text for _ in range(3)]
        return texts + [await astreamed(llm) for _ in range(3)]

    assert asyncio.run(main()) == ["OK"] * 6
    # every other request met the connection kept alive after the one before (the new connection of a request
    # sent again is not kept), which the server closed; each is answered on a new one
    assert srv.dropped == 3
    assert all(answered == (count == 1) for _, count, answered in srv.seen)


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_closed_kept_alive_connection_is_retried_on_a_new_one_on_the_sync_path(server, reset):
    srv = server(reset=reset)
    llm = llm_for(srv)
    texts = [llm.complete(MSGS).text for _ in range(3)] + [streamed(llm) for _ in range(3)]
    assert texts == ["OK"] * 6
    assert srv.dropped >= 2  # at least the second and the fourth request (a stream may not keep its connection)
    assert all(answered == (count == 1) for _, count, answered in srv.seen)


def test_the_retry_takes_a_new_connection_not_another_kept_alive_one(server):
    srv = server()
    llm = llm_for(srv)
    srv.together = threading.Barrier(3)

    async def main():
        first = await asyncio.gather(*(llm.acomplete(MSGS) for _ in range(3)))  # three connections kept alive
        srv.together = None
        return [r.text for r in first] + [(await llm.acomplete(MSGS)).text]

    assert asyncio.run(main()) == ["OK"] * 4
    assert srv.connections >= 4 and srv.dropped == 1  # not a second kept-alive one: it is closed too


def test_many_concurrent_requests_on_closed_kept_alive_connections_all_answer(server):
    srv = server()
    llm = llm_for(srv)

    async def main():
        await llm.acomplete(MSGS)
        return [r.text for r in await asyncio.gather(*(llm.acomplete(MSGS) for _ in range(40)))]

    assert asyncio.run(main()) == ["OK"] * 40


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_request_that_fails_on_a_new_connection_is_not_sent_again_by_the_transport(server, path):
    srv = server(drop="first")
    llm = llm_for(srv)
    with pytest.raises(LLMConnectionError, match="after 1 attempt"):
        if path == "sync":
            llm.complete(MSGS)
        else:
            asyncio.run(llm.acomplete(MSGS))
    assert srv.seen == [(srv.seen[0][0], 1, False)]  # one request, on a new connection: no second one


def test_max_retries_still_counts_the_failures_after_the_stale_retry(server):
    srv = server(drop="first")
    llm = llm_for(srv, retries=2)
    with pytest.raises(LLMConnectionError, match="after 3 attempts"):
        asyncio.run(llm.acomplete(MSGS))
    assert len(srv.seen) == 3


"""The async client's connection pools (``llm/http_pools.py``): requests spread over several small pools
when many are in flight, one pool for a few, and an environment proxy still honoured."""

from __future__ import annotations

import asyncio

import pytest
from test_openai_stream import RawServer, acollect, raw  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import LLMConnectionError
from chatgpt_tool_hub.llm import http_pools
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from tests.chat_server import ChatServer


def transport_of(llm: OpenAICompatibleLLM, loop) -> object:
    return llm._aclients[loop][0]._client._transport


def test_many_requests_in_flight_spread_over_pools_and_few_use_one(raw):
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=raw.url, timeout=20, max_retries=0)
    seen = {}

    async def main():
        loop = asyncio.get_running_loop()
        assert (await acollect(llm)).text == "OK"  # one request: one pool
        transport = transport_of(llm, loop)
        seen["one"] = (len(transport.pools), list(transport.busy))
        raw.gate.clear()  # the next responses wait until every request is in flight
        tasks = [asyncio.ensure_future(acollect(llm)) for _ in range(2 * http_pools.PER_POOL + 3)]
        while raw.requests < 1 + len(tasks):
            await asyncio.sleep(0.01)
        seen["busy"] = (len(transport.pools), list(transport.busy))
        seen["tls"] = {id(pool._pool._ssl_context) for pool in transport.pools}
        raw.gate.set()
        texts = [r.text for r in await asyncio.gather(*tasks)]
        seen["after"] = (len(transport.pools), list(transport.busy))
        return texts

    texts = asyncio.run(main())
    assert texts == ["OK"] * (2 * http_pools.PER_POOL + 3)
    assert seen["one"] == (1, [0])
    pools, busy = seen["busy"]
    assert pools == 3 and sum(busy) == 2 * http_pools.PER_POOL + 3 and max(busy) <= http_pools.PER_POOL
    assert seen["after"] == (3, [0, 0, 0])  # every request left its pool's count when its body was closed
    assert len(seen["tls"]) == 1  # the pools share one TLS context (loading the CA file once)


def test_no_more_pools_than_the_most(monkeypatch, raw):
    monkeypatch.setattr(http_pools, "PER_POOL", 1)
    monkeypatch.setattr(http_pools, "MOST_POOLS", 3)
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=raw.url, timeout=20, max_retries=0)

    async def main():
        raw.gate.clear()
        tasks = [asyncio.ensure_future(acollect(llm)) for _ in range(7)]
        while raw.requests < 7:
            await asyncio.sleep(0.01)
        transport = transport_of(llm, asyncio.get_running_loop())
        counts = (len(transport.pools), sorted(transport.busy))
        raw.gate.set()
        await asyncio.gather(*tasks)
        return counts

    assert asyncio.run(main()) == (3, [2, 2, 3])


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY", "http_proxy"])
def test_an_environment_proxy_is_still_used_by_the_async_client(monkeypatch, chat_server, variable):
    with ChatServer() as dead:
        dead_url = dead.root  # nothing listens there any more
    monkeypatch.setenv(variable, dead_url)
    assert http_pools.pooled_async_client(5) is None
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=chat_server.url, timeout=5, max_retries=0)
    with pytest.raises(LLMConnectionError):
        asyncio.run(llm.acomplete([{"role": "user", "content": "hi"}]))
    assert chat_server.requests == []  # the request went to the (dead) proxy


def test_without_a_proxy_the_async_client_answers_through_the_pools(chat_server):
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=chat_server.url, timeout=5, max_retries=0)
    chat_server.replies = ["pooled"]

    async def main():
        answer = await llm.acomplete([{"role": "user", "content": "hi"}])
        return answer.text, type(transport_of(llm, asyncio.get_running_loop())).__name__

    assert asyncio.run(main()) == ("pooled", "SpreadTransport")

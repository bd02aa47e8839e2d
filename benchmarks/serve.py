"""Throughput of the async path and of ``tool-hub serve``, each beside a bare ``AsyncOpenAI`` loop.

Both measurements use a scripted OpenAI-compatible LLM server (started here, in
its own process) that answers every request after a fixed latency (50 ms by
default), streamed or not, with a reply that needs no tool.

``aask``: questions per second at 64 concurrent asyncio tasks:

* a bare ``AsyncOpenAI`` loop making the same LLM calls (the peer);
* ``await app.aask(q)`` (the async path: ``acomplete`` awaited, no thread per question);
* ``await asyncio.to_thread(app.ask, q)``, what ``aask`` did before.

``serve``: 200 concurrent streaming clients (the ``openai`` client) against a
``tool-hub serve`` process, beside the same clients streaming from the LLM
server directly: throughput, p50 / p99 latency, errors, and the server's
resident memory sampled every 1,000 requests (it should stay flat).

    python benchmarks/serve.py aask  [--questions 2000] [--tasks 64] [--latency 0.05]
    python benchmarks/serve.py serve [--requests 10000] [--clients 200] [--latency 0.05]
    python benchmarks/serve.py llm --port 8100 [--latency 0.05]    # only the scripted LLM server

Needs ``pip install "chatgpt-tool-hub[server]"``. Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLY = "Thought: Do I need to use a tool? No\nAI: Hello from the scripted model, nothing to do here."


# ---- the scripted LLM server ---------------------------------------------------------------------


def llm_app(latency: float):
    """A chat-completions endpoint that waits ``latency`` seconds, then answers REPLY (SSE when asked)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request):
        body = await request.json()
        await asyncio.sleep(latency)
        usage = {"prompt_tokens": 50, "completion_tokens": 15, "total_tokens": 65}
        cid, created, model = "chatcmpl-" + uuid.uuid4().hex[:8], int(time.time()), body.get("model", "m")
        if not body.get("stream"):
            return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                                              "finish_reason": "stop"}], "usage": usage})

        async def events():
            def chunk(delta, finish=None, **extra):
                return "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                              "model": model, "choices": [{"index": 0, "delta": delta,
                                                                           "finish_reason": finish}], **extra}) + "\n\n"
            yield chunk({"role": "assistant", "content": ""})
            for piece in REPLY.split(" "):
                yield chunk({"content": piece + " "})
            yield chunk({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                yield "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                             "model": model, "choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start_llm_server(latency: float) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "llm", "--port", str(port), "--latency", str(latency)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---- aask -----------------------------------------------------------------------------------------


async def _spread(n: int, tasks: int, one) -> float:
    """Run ``one(i)`` for i < n on ``tasks`` concurrent workers; questions per second."""
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker():
        while not queue.empty():
            await one(queue.get_nowait())

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return n / (time.perf_counter() - started)


def bench_aask(args) -> None:
    import openai

    from chatgpt_tool_hub.apps import AppFactory

    proc, port = start_llm_server(args.latency)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        app = AppFactory().create_app(llm_api_base_url=base, model_name="scripted", no_default=True,
                                      workspace_dir=tempfile.mkdtemp(), max_retries=0)
        app.ask("warm up")

        async def bare() -> float:
            client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
            one = lambda i: client.chat.completions.create(  # noqa: E731
                model="scripted", messages=[{"role": "user", "content": f"q{i}"}])
            try:
                return await _spread(args.questions, args.tasks, one)
            finally:
                await client.close()

        async def aask() -> float:
            return await _spread(args.questions, args.tasks, lambda i: app.aask(f"q{i}", session_id=f"s{i % 500}"))

        async def threaded() -> float:
            return await _spread(args.questions, args.tasks,
                                 lambda i: asyncio.to_thread(app.ask, f"q{i}", session_id=f"s{i % 500}"))

        print(f"aask: {args.questions} questions, {args.tasks} concurrent tasks, LLM latency "
              f"{args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs")
        results = {}
        for name, run in (("bare AsyncOpenAI loop", bare), ("app.aask (async path)", aask),
                          ("asyncio.to_thread(app.ask) (before)", threaded)):
            results[name] = asyncio.run(run())
        peer = results["bare AsyncOpenAI loop"]
        print(f"{'':38} {'q/s':>8} {'vs bare':>8}")
        for name, qps in results.items():
            print(f"{name:38} {qps:8.1f} {qps / peer:7.2f}x")
        app.close()
    finally:
        proc.terminate()
        proc.wait()


# ---- serve ----------------------------------------------------------------------------------------


async def _clients(n: int, clients: int, base: str, model: str, key: str, progress=None) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
    latencies: list[float] = []
    errors: list[str] = []
    done = [0]
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def one(i: int) -> None:
        started = time.perf_counter()
        try:
            stream = await client.chat.completions.create(
                model=model, stream=True, user=f"user{i % 1000}",
                messages=[{"role": "user", "content": f"question {i}"}])
            text = ""
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
            if not text:
                errors.append("empty answer")
        except Exception as exc:  # noqa: BLE001 - counted
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        latencies.append(time.perf_counter() - started)
        done[0] += 1
        if progress is not None:
            progress(done[0])

    async def worker():
        while not queue.empty():
            await one(queue.get_nowait())

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - started
    await client.close()
    latencies.sort()
    return {"rps": n / seconds, "p50": statistics.median(latencies) * 1000,
            "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000, "errors": errors}


def bench_serve(args) -> None:
    llm, llm_port = start_llm_server(args.latency)
    port = free_port()
    workspace = tempfile.mkdtemp()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_API_BASE_URL": f"http://127.0.0.1:{llm_port}/v1",
           "MODEL_NAME": "scripted", "NO_DEFAULT": "true", "MAX_RETRIES": "0",
           "SERVE_MAX_CONCURRENT_RUNS": str(max(args.clients, 64)), "SERVE_WORKSPACE_ROOT": workspace}
    server = subprocess.Popen([sys.executable, "-c", "from chatgpt_tool_hub.server.cli import main; main()",
                               "--port", str(port)], env=env, cwd=workspace,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port)
        samples: list[tuple[int, float]] = []

        def progress(count: int) -> None:
            if count % 1000 == 0:
                samples.append((count, rss_mb(server.pid)))

        print(f"serve: {args.requests} streamed requests, {args.clients} concurrent clients, LLM latency "
              f"{args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs")
        asyncio.run(_clients(min(400, args.requests), args.clients, f"http://127.0.0.1:{port}/v1", "tool-hub", "x"))
        bare = asyncio.run(_clients(args.requests, args.clients, f"http://127.0.0.1:{llm_port}/v1", "scripted", "x"))
        served = asyncio.run(_clients(args.requests, args.clients, f"http://127.0.0.1:{port}/v1", "tool-hub", "x",
                                      progress))
        print(f"{'':28} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        for name, row in (("bare AsyncOpenAI -> LLM", bare), ("tool-hub serve", served)):
            print(f"{name:28} {row['rps']:8.1f} {row['p50']:8.1f} {row['p99']:8.1f} {len(row['errors']):7d}")
        print(f"throughput: tool-hub serve is {bare['rps'] / served['rps']:.2f}x slower than the bare loop "
              f"(goal: within 1.2x)")
        print(f"server peak RSS {hwm_mb(server.pid):.0f} MB; RSS every 1000 requests (MB): "
              + ", ".join(f"{rss:.0f}" for _, rss in samples))
        for error in (bare["errors"] + served["errors"])[:5]:
            print("error:", error)
    finally:
        server.terminate()
        server.wait(30)
        llm.terminate()
        llm.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("aask")
    one.add_argument("--questions", type=int, default=2000)
    one.add_argument("--tasks", type=int, default=64)
    one.add_argument("--latency", type=float, default=0.05)
    two = sub.add_parser("serve")
    two.add_argument("--requests", type=int, default=10000)
    two.add_argument("--clients", type=int, default=200)
    two.add_argument("--latency", type=float, default=0.05)
    three = sub.add_parser("llm")
    three.add_argument("--port", type=int, required=True)
    three.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    if args.mode == "llm":
        import uvicorn

        uvicorn.run(llm_app(args.latency), host="127.0.0.1", port=args.port, log_level="warning",
                    access_log=False, backlog=4096)
    elif args.mode == "aask":
        bench_aask(args)
    else:
        bench_serve(args)


if __name__ == "__main__":
    main()

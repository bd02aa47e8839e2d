"""Throughput of the async path and of ``tool-hub serve``, each beside a bare ``AsyncOpenAI`` loop.

Both measurements use a scripted OpenAI-compatible LLM server (started here, in
its own process) that answers every request after a fixed latency (50 ms by
default), streamed or not, with a reply that needs no tool.

``aask``: questions per second at 64 concurrent asyncio tasks:

* a bare ``AsyncOpenAI`` loop making the same LLM calls (the peer);
* ``await app.aask(q)`` (the async path: ``acomplete`` awaited, no thread per question);
* ``await asyncio.to_thread(app.ask, q)``, what ``aask`` did before.

``serve``: 200 concurrent streaming clients (the ``openai`` client) against a
``tool-hub serve`` process, beside two peers: the same clients streaming from
the LLM server directly (no server hop at all), and the same clients streaming
through a bare FastAPI / uvicorn proxy (its own process: ``AsyncOpenAI`` with
``stream=True`` upstream, each chunk re-sent as a server-sent event), which has
the hop ``tool-hub serve`` has but no engine. Printed: throughput, p50 / p99
latency, errors, the CPU time each process spent per request (the client, the
LLM server and the server in between share the machine's cores), and the
server's resident memory sampled every 1,000 requests (it should stay flat).

    python benchmarks/serve.py aask  [--questions 2000] [--tasks 64] [--latency 0.05]
    python benchmarks/serve.py serve [--requests 10000] [--clients 200] [--latency 0.05]
    python benchmarks/serve.py llm --port 8100 [--latency 0.05]    # only the scripted LLM server
    python benchmarks/serve.py proxy --port 8101 --upstream http://127.0.0.1:8100/v1   # only the proxy

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


def proxy_app(upstream: str):
    """The peer with a server hop: a bare FastAPI proxy streaming each chat completion from ``upstream``."""
    import openai
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()
    client = openai.AsyncOpenAI(base_url=upstream, api_key="x", max_retries=0, timeout=120)

    async def completions(request):  # a plain route: the handler takes the request
        body = await request.json()
        stream = await client.chat.completions.create(model="scripted", messages=body["messages"], stream=True,
                                                      stream_options={"include_usage": True})

        async def events():
            async for chunk in stream:
                yield "data: " + chunk.model_dump_json(exclude_unset=True) + "\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    app.router.add_route("/v1/chat/completions", completions, methods=["POST"])
    return app


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


def start_proxy(upstream: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "proxy", "--port", str(port), "--upstream", upstream],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) a process has used: another one's, or this one's."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


ANSWER = REPLY.split("AI: ", 1)[1]


def expected_text(model: str) -> str:
    """What one client must read: the LLM's reply verbatim from a peer, only the answer from tool-hub serve."""
    return REPLY if model == "scripted" else ANSWER


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
            if text.strip() != expected_text(model):
                errors.append(f"wrong answer: {text[:80]!r}")
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


def _measured(n: int, clients: int, base: str, model: str, pids: dict, progress=None) -> dict:
    """One ``_clients`` run, with the CPU milliseconds per request each process in ``pids`` spent."""
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    row = asyncio.run(_clients(n, clients, base, model, "x", progress))
    row["cpu"] = {name: 1000 * (cpu_s(pid) - before[name]) / n for name, pid in pids.items()}
    return row


def bench_serve(args) -> None:
    llm, llm_port = start_llm_server(args.latency)
    llm_base = f"http://127.0.0.1:{llm_port}/v1"
    proxy, proxy_port = start_proxy(llm_base)
    port = free_port()
    workspace = tempfile.mkdtemp()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_API_BASE_URL": llm_base,
           "MODEL_NAME": "scripted", "NO_DEFAULT": "true", "MAX_RETRIES": "0",
           "SERVE_MAX_CONCURRENT_RUNS": str(max(args.clients, 64)), "SERVE_WORKSPACE_ROOT": workspace,
           # one key (the clients' "x"): one tenant, no per-key caps; the clients' 1000 users all stay built
           "SERVE_API_KEYS": "x", "SERVE_MAX_USERS": "1000"}
    server = subprocess.Popen([sys.executable, "-c", "from chatgpt_tool_hub.server.cli import main; main()",
                               "--port", str(port)], env=env, cwd=workspace,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        samples: list[tuple[int, float]] = []

        def progress(count: int) -> None:
            if count % 1000 == 0:
                samples.append((count, rss_mb(server.pid)))

        print(f"serve: {args.requests} streamed requests, {args.clients} concurrent clients, LLM latency "
              f"{args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs shared by the client, the LLM server and "
              f"the server in between")
        warm = min(400, args.requests)
        asyncio.run(_clients(warm, args.clients, f"http://127.0.0.1:{proxy_port}/v1", "scripted", "x"))
        asyncio.run(_clients(warm, args.clients, f"http://127.0.0.1:{port}/v1", "tool-hub", "x"))
        client, upstream = {"client": None, "LLM": llm.pid}, {"client": None, "LLM": llm.pid}
        rows = {
            "bare AsyncOpenAI -> LLM": _measured(args.requests, args.clients, llm_base, "scripted", client),
            "FastAPI proxy -> LLM": _measured(args.requests, args.clients, f"http://127.0.0.1:{proxy_port}/v1",
                                              "scripted", {**upstream, "server": proxy.pid}),
            "tool-hub serve": _measured(args.requests, args.clients, f"http://127.0.0.1:{port}/v1", "tool-hub",
                                        {**upstream, "server": server.pid}, progress),
        }
        print(f"{'':26} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}   CPU ms per request: "
              f"{'client':>6} {'LLM':>6} {'server':>6}")
        for name, row in rows.items():
            cpu = row["cpu"]
            server_cpu = f"{cpu['server']:6.2f}" if "server" in cpu else f"{'-':>6}"
            print(f"{name:26} {row['rps']:8.1f} {row['p50']:8.1f} {row['p99']:8.1f} {len(row['errors']):7d}"
                  f"   {'':20}{cpu['client']:6.2f} {cpu['LLM']:6.2f} {server_cpu}")
        served = rows["tool-hub serve"]["rps"]
        bare, proxied = rows["bare AsyncOpenAI -> LLM"]["rps"], rows["FastAPI proxy -> LLM"]["rps"]
        print(f"throughput, peer / tool-hub serve: bare loop {bare / served:.2f}, FastAPI proxy {proxied / served:.2f} "
              f"(goal: at most 1.2 against the bare loop)")
        print(f"server peak RSS {hwm_mb(server.pid):.0f} MB; RSS every 1000 requests (MB): "
              + ", ".join(f"{rss:.0f}" for _, rss in samples))
        for error in [e for row in rows.values() for e in row["errors"]][:5]:
            print("error:", error)
    finally:
        for proc in (server, proxy, llm):
            proc.terminate()
            proc.wait(30)


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
    four = sub.add_parser("proxy")
    four.add_argument("--port", type=int, required=True)
    four.add_argument("--upstream", required=True)
    args = parser.parse_args()
    if args.mode in ("llm", "proxy"):
        import uvicorn

        app = llm_app(args.latency) if args.mode == "llm" else proxy_app(args.upstream)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, backlog=4096)
    elif args.mode == "aask":
        bench_aask(args)
    else:
        bench_serve(args)


if __name__ == "__main__":
    main()

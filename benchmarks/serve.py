"""Throughput of the async path and of ``tool-hub serve``, each beside a bare ``AsyncOpenAI`` loop.

Both measurements use a scripted OpenAI-compatible LLM server (started here, in
its own uvicorn process, default keep-alive timeout of 5 s) that answers every
request after a fixed latency (50 ms by default), streamed or not, with a reply
that needs no tool.

The sides are measured in interleaved rounds (A, B, C, A, B, C, ...; each round
a share of the requests), after one unmeasured warm-up round each (its errors are counted); a
side's figures are its rounds' sums. For each side: throughput (requests over the wall
time of its rounds), wall seconds, errors (any exception, a wrong answer), and
the CPU seconds each process spent during its rounds (the client process, the
LLM server, the server in between), also per request. Any error makes the
script exit with status 1.

``aask``: questions per second at 64 concurrent asyncio tasks in one process:

* a bare ``AsyncOpenAI`` loop making the same LLM calls, not streamed (the peer;
  ``max_retries=0``; a new client each round);
* ``await app.aask(q)`` (the async path: ``acomplete`` awaited, no thread per
  question; ``max_retries=0``; the app's client kept over the rounds);
* ``await asyncio.to_thread(app.ask, q)``, what ``aask`` did before.

Every answer's text is checked.

``serve``: 200 concurrent streaming clients (``openai.AsyncOpenAI``,
``max_retries=0``, a new client each round: one kept over the rounds would sit
idle while the other sides run, about as long as the servers' keep-alive, and
meet connections they close) against three sides: the LLM server directly (the
peer: no server hop at all); a bare FastAPI / uvicorn proxy (its own process:
``AsyncOpenAI`` with openai's default retries and ``stream=True`` upstream, each
chunk re-sent as a server-sent event), which has the hop ``tool-hub serve`` has
but no engine; and a ``tool-hub serve`` process (``MAX_RETRIES=0``: a failed
LLM call is an error here, not hidden by a retry; its LLM client is kept over
the rounds, as a server's is). Every client checks its answer's text. Also
printed: p50 / p99 latency per side, and the server's resident memory sampled
every 1,000 of its requests (it should stay flat).

    python benchmarks/serve.py aask  [--questions 2000] [--tasks 64] [--rounds 4] [--latency 0.05]
    python benchmarks/serve.py serve [--requests 10000] [--clients 200] [--rounds 5] [--latency 0.05]
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
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

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
    client = openai.AsyncOpenAI(base_url=upstream, api_key="x", timeout=120)  # openai's default retries (2)

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


# ---- measuring sides in interleaved rounds -------------------------------------------------------


class Side:
    """One side's figures, summed over its rounds."""

    def __init__(self, name: str, pids: dict[str, int | None]):
        self.name, self.pids = name, pids  # the processes whose CPU time is counted (None: this one)
        self.requests, self.wall = 0, 0.0
        self.cpu = {process: 0.0 for process in pids}
        self.latencies: list[float] = []
        self.errors: list[str] = []

    async def round(self, n: int, workers: int, one) -> None:
        """``one(i)`` for ``n`` requests on ``workers`` concurrent tasks; ``one`` returns an error or None."""
        queue: asyncio.Queue = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)

        async def worker():
            while not queue.empty():
                i = queue.get_nowait()
                started = time.perf_counter()
                try:
                    error = await one(i)
                except Exception as exc:  # noqa: BLE001 - counted, with its causes
                    error, cause = f"{type(exc).__name__}: {exc}", exc.__cause__ or exc.__context__
                    while cause is not None:
                        error, cause = f"{error} <- {type(cause).__name__}: {cause}", cause.__cause__ or cause.__context__
                self.latencies.append(time.perf_counter() - started)
                if error:
                    self.errors.append(error[:300])

        before = {process: cpu_s(pid) for process, pid in self.pids.items()}
        started = time.perf_counter()
        if hasattr(one, "start"):
            await one.start()
        await asyncio.gather(*(worker() for _ in range(workers)))
        if hasattr(one, "stop"):
            await one.stop()
        self.wall += time.perf_counter() - started
        self.requests += n
        for process, pid in self.pids.items():
            self.cpu[process] += cpu_s(pid) - before[process]

    @property
    def rate(self) -> float:
        return self.requests / self.wall if self.wall else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def interleaved(sides: list[tuple[Side, Any]], total: int, rounds: int, workers: int) -> None:
    """One unmeasured warm-up round per side, then ``rounds`` rounds of A, B, C...: ``total`` requests per
    side in all. ``sides`` pairs each :class:`Side` with its ``one(i)``."""
    for side, one in sides:  # connections opened, code paths warmed; not measured, its errors counted
        warm = Side(side.name, {})
        await warm.round(min(workers * 2, total), workers, one)
        side.errors += [f"(warm-up) {error}" for error in warm.errors]
    shares = [total // rounds + (1 if r < total % rounds else 0) for r in range(rounds)]
    for share in shares:
        for side, one in sides:
            await side.round(share, workers, one)


def report(sides: list[Side], unit: str, peer: Side) -> int:
    """The table, the peer's figure beside each side's; the number of errors."""
    processes = list(dict.fromkeys(process for side in sides for process in side.cpu))
    print(f"{'':36} {unit:>7} {'vs peer':>7} {'wall s':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}   "
          "CPU s (ms per request): " + "  ".join(f"{p:>14}" for p in processes))
    for side in sides:
        cpu = "  ".join(f"{side.cpu[p]:6.2f} ({1000 * side.cpu[p] / side.requests:5.2f})" if p in side.cpu
                        else f"{'-':>14}" for p in processes)
        print(f"{side.name:36} {side.rate:7.1f} {side.rate / peer.rate:6.2f}x {side.wall:7.1f} "
              f"{side.percentile(0.5):7.1f} {side.percentile(0.99):7.1f} {len(side.errors):6d}   {'':23} {cpu}")
    errors = [e for side in sides for e in side.errors]
    for error in dict.fromkeys(errors):
        print(f"error ({errors.count(error)}x): {error}")
    return len(errors)


# ---- aask -----------------------------------------------------------------------------------------


def bench_aask(args) -> int:
    import openai

    from chatgpt_tool_hub.apps import AppFactory

    proc, port = start_llm_server(args.latency)
    base = f"http://127.0.0.1:{port}/v1"
    pids = {"client": None, "LLM": proc.pid}
    try:
        app = AppFactory().create_app(llm_api_base_url=base, model_name="scripted", no_default=True,
                                      workspace_dir=tempfile.mkdtemp(), max_retries=0)
        app.ask("warm up")

        def checked(answer: str) -> str | None:
            return None if answer.strip() == ANSWER else f"wrong answer: {answer[:80]!r}"

        class Bare:  # a new client each round, as the serve sides' (StreamingClients)
            client: Any = None

            async def start(self) -> None:
                self.client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0)

            async def stop(self) -> None:
                await self.client.close()

            async def __call__(self, i: int) -> str | None:
                reply = await self.client.chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": f"q{i}"}])
                text = reply.choices[0].message.content or ""
                return None if text == REPLY else f"wrong answer: {text[:80]!r}"

        async def main() -> list[Side]:

            async def aask(i: int) -> str | None:
                return checked(await app.aask(f"q{i}", session_id=f"s{i % 500}"))

            async def threaded(i: int) -> str | None:
                return checked(await asyncio.to_thread(app.ask, f"q{i}", session_id=f"s{i % 500}"))

            sides = [(Side("bare AsyncOpenAI loop (peer)", pids), Bare()),
                     (Side("app.aask (async path)", pids), aask),
                     (Side("asyncio.to_thread(app.ask) (before)", pids), threaded)]
            await interleaved(sides, args.questions, args.rounds, args.tasks)
            return [side for side, _ in sides]

        print(f"aask: {args.questions} questions per side in {args.rounds} interleaved rounds, {args.tasks} "
              f"concurrent tasks, LLM latency {args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs")
        sides = asyncio.run(main())
        errors = report(sides, "q/s", sides[0])
        app.close()
        return errors
    finally:
        proc.terminate()
        proc.wait()


# ---- serve ----------------------------------------------------------------------------------------


ANSWER = REPLY.split("AI: ", 1)[1]


def expected_text(model: str) -> str:
    """What one client must read: the LLM's reply verbatim from a peer, only the answer from tool-hub serve."""
    return REPLY if model == "scripted" else ANSWER


class StreamingClients:
    """A side's clients: one ``openai.AsyncOpenAI`` client per round, made when the round starts and closed
    when it ends (its connections are not kept while the other sides' rounds run: they would sit idle
    about as long as the servers' 5 s keep-alive); ``one(i)`` streams one chat completion and checks its
    text."""

    def __init__(self, base: str, model: str, progress=None):
        self.base, self.model, self.progress = base, model, progress
        self.client: Any = None
        self.done = 0

    async def start(self) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=self.base, api_key="x", max_retries=0, timeout=120)

    async def stop(self) -> None:
        await self.client.close()

    async def __call__(self, i: int) -> str | None:
        stream = await self.client.chat.completions.create(
            model=self.model, stream=True, user=f"user{i % 1000}",
            messages=[{"role": "user", "content": f"question {i}"}])
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        self.done += 1
        if self.progress is not None:
            self.progress(self.done)
        return None if text.strip() == expected_text(self.model) else f"wrong answer: {text[:80]!r}"


def bench_serve(args) -> int:
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
        samples: list[float] = []

        def progress(count: int) -> None:
            if count % 1000 == 0:
                samples.append(rss_mb(server.pid))

        async def main() -> list[Side]:
            sides = [(Side("clients -> LLM directly (peer)", {"client": None, "LLM": llm.pid}),
                      StreamingClients(llm_base, "scripted")),
                     (Side("clients -> FastAPI proxy -> LLM", {"client": None, "LLM": llm.pid, "server": proxy.pid}),
                      StreamingClients(f"http://127.0.0.1:{proxy_port}/v1", "scripted")),
                     (Side("clients -> tool-hub serve -> LLM", {"client": None, "LLM": llm.pid,
                                                                "server": server.pid}),
                      StreamingClients(f"http://127.0.0.1:{port}/v1", "tool-hub", progress))]
            await interleaved(sides, args.requests, args.rounds, args.clients)
            return [side for side, _ in sides]

        print(f"serve: {args.requests} streamed requests per side in {args.rounds} interleaved rounds, "
              f"{args.clients} concurrent clients, LLM latency {args.latency * 1000:.0f} ms, {os.cpu_count()} CPUs "
              f"shared by the clients, the LLM server and the server in between")
        sides = asyncio.run(main())
        errors = report(sides, "req/s", sides[0])
        print(f"tool-hub serve / direct throughput: {sides[2].rate / sides[0].rate:.2f} (goal: at least 0.9); "
              f"FastAPI proxy / direct: {sides[1].rate / sides[0].rate:.2f}")
        print(f"server peak RSS {hwm_mb(server.pid):.0f} MB; RSS every 1000 of its requests (MB): "
              + ", ".join(f"{rss:.0f}" for rss in samples))
        return errors
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
    one.add_argument("--rounds", type=int, default=4)
    one.add_argument("--latency", type=float, default=0.05)
    two = sub.add_parser("serve")
    two.add_argument("--requests", type=int, default=10000)
    two.add_argument("--clients", type=int, default=200)
    two.add_argument("--rounds", type=int, default=5)
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
    else:
        errors = bench_aask(args) if args.mode == "aask" else bench_serve(args)
        if errors:
            print(f"{errors} error(s)")
            sys.exit(1)


if __name__ == "__main__":
    main()

"""A scripted OpenAI-compatible chat-completions server for the benchmarks, run in its own process.

Each conversation asks for a number of tool steps in its first user message (``[steps=N]``). The
server counts the echo tool's results already in the request's messages (distinct ``pong#K`` marks,
wherever a client puts them: ``tool`` messages, a ReAct scratchpad, an ``Observation:`` turn) and
answers:

* fewer than N results: call ``echo`` with the input ``K`` (K = results so far);
* N results: the final answer ``done``.

A request with ``tools`` gets native tool calls (a ``final_answer`` tool, when the request offers one,
carries the final answer, as smolagents expects); a request without gets the ReAct text protocol
(``Thought: / Action: echo / Action Input: K``, then ``Final Answer: done``). Streamed (SSE) and plain
responses both work; ``GET /v1/models`` lists one model. A request the script cannot answer gets
HTTP 400, so a client that misreads the script fails loudly rather than looping.

    python benchmarks/_scripted_llm.py --port 8100 [--latency 0.0]

``GET /stats`` says how many requests it answered. From another script: ``start_server(latency) ->
ScriptedServer`` (``.base_url``, ``.cpu_s()``: its CPU seconds from /proc, ``.served()``, ``.stop()``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

STEPS = re.compile(r"\[steps=(\d+)\]")
PONG = re.compile(r"pong#(\d+)")
FINAL = "done"


def echo_result(text: str) -> str:
    """What every side's echo tool returns: the mark the server counts."""
    return f"pong#{str(text).strip()}"


def question(steps: int) -> str:
    return f"Call the echo tool as told, then answer. [steps={steps}]"


# ---- deciding the reply ------------------------------------------------------------------------------


def _texts(value: Any) -> list[str]:
    """Every string inside a message's content (a string, a list of parts, nested dicts)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    if isinstance(value, dict):
        return [t for key, item in value.items() if key != "tool_calls" for t in _texts(item)]
    return []


def decide(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message that answers ``body``; ValueError when the request does not fit the script."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("no messages")
    user_text = "\n".join(t for m in messages if isinstance(m, dict) and m.get("role") == "user"
                          for t in _texts(m.get("content")))
    found = STEPS.search(user_text)
    if not found:
        raise ValueError("no [steps=N] in the user's messages")
    steps = int(found.group(1))
    done = {int(k) for m in messages if isinstance(m, dict) and m.get("role") != "system"
            for t in _texts(m.get("content")) for k in PONG.findall(t)}
    k = len(done)
    tools = {}
    for spec in body.get("tools") or []:
        fn = spec.get("function") or {}
        params = (fn.get("parameters") or {}).get("properties") or {}
        tools[fn.get("name")] = next(iter(params), "input")
    if tools:
        if k < steps:
            if "echo" not in tools:
                raise ValueError(f"no echo tool among {sorted(tools)}")
            return _call("echo", {tools["echo"]: str(k)}, k)
        if "final_answer" in tools:
            return _call("final_answer", {tools["final_answer"]: FINAL}, k)
        return {"role": "assistant", "content": FINAL}
    if k < steps:
        return {"role": "assistant", "content": f"Thought: step {k}\nAction: echo\nAction Input: {k}"}
    return {"role": "assistant", "content": f"Thought: I now know the final answer\nFinal Answer: {FINAL}"}


def _call(name: str, arguments: dict[str, Any], k: int) -> dict[str, Any]:
    call = {"id": f"call_{k}_{uuid.uuid4().hex[:8]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


# ---- the app ------------------------------------------------------------------------------------------


def app(latency: float = 0.0):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    served = {"completions": 0, "models": 0}

    async def stats(request: Request):
        return JSONResponse(served)

    async def models(request: Request):
        served["models"] += 1
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0,
                                                         "owned_by": "scripted"}]})

    async def completions(request: Request):
        served["completions"] += 1
        body = await request.json()
        try:
            message = decide(body)
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        if latency:
            await asyncio.sleep(latency)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 50, "completion_tokens": 15, "total_tokens": 65}
        cid, created, model = "chatcmpl-" + uuid.uuid4().hex[:8], int(time.time()), body.get("model", "scripted")
        if not body.get("stream"):
            return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": usage})

        def chunk(delta: dict[str, Any], reason: str | None = None) -> str:
            return "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                          "model": model, "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": reason}]}) + "\n\n"

        async def events():
            yield chunk({"role": "assistant", "content": ""})
            if message.get("tool_calls"):
                calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                yield chunk({"tool_calls": calls})
            else:
                for piece in re.split(r"(?<=\s)", message["content"]):
                    yield chunk({"content": piece})
            yield chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                yield "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                             "model": model, "choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"]),
                             Route("/stats", stats, methods=["GET"])])


# ---- running it in its own process -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``, all its threads, from /proc: each thread's
    ``schedstat`` (nanoseconds on a CPU), else ``stat``'s utime + stime (clock ticks)."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class ScriptedServer:
    proc: subprocess.Popen
    port: int
    latency: float

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)

    def served(self) -> dict[str, int]:
        """Requests answered so far: ``{"completions": n, "models": m}``."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_server(latency: float = 0.0, wait_s: float = 60.0) -> ScriptedServer:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--port", str(port), "--latency", str(latency)],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the scripted LLM server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return ScriptedServer(proc, port, latency)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the scripted LLM server did not listen on port {port} within {wait_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply (default 0)")
    args = parser.parse_args(argv)
    uvicorn.run(app(args.latency), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

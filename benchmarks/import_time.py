"""Import time of the package, and a process's first answer beside its peers.

Part 1, imports: each figure is the median over fresh interpreters of the wall
time and the CPU time (user + system, read from the child's rusage) of one
statement, minus the median of an interpreter that imports nothing; the
statements run interleaved, one of each per round. The heavy modules each
statement leaves loaded are listed.

Part 2, the first answer: in a fresh interpreter each system imports itself,
builds an agent and answers "hi" through its real OpenAI client (the ``openai``
package) from a chat-completions server this script runs on 127.0.0.1 (it
answers "Hello!" in one reply; smolagents' ToolCallingAgent gets its
``final_answer`` tool call). Systems: this package (``AppFactory().create_app``
with its default tools, then ``app.ask``), LangChain (``ChatOpenAI`` in
langgraph's ``create_react_agent`` with one tool), smolagents
(``ToolCallingAgent`` over ``OpenAIServerModel`` with one tool) and the OpenAI
Agents SDK (``Agent`` with one function tool over
``OpenAIChatCompletionsModel``, tracing off), each where installed, one of each
per round. Per system, the medians of: the CPU and wall time from the first
import to the answer (the interpreter's own start-up not included), the
resident memory (RSS) right after the answer, the requests the server got; and,
from the last round, the memory of each further agent: ``APPS`` more agents
built and asked once each in the same process, as the RSS growth per agent and
the Python allocations still held per agent (``tracemalloc``). A run that fails
or answers anything but "Hello!" is an error; the script exits 1 when there
was any.

    python benchmarks/import_time.py [--rounds 5] [--apps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RUNS = 7
STATEMENTS = {
    "import chatgpt_tool_hub": "import chatgpt_tool_hub",
    "from chatgpt_tool_hub.apps import AppFactory": "from chatgpt_tool_hub.apps import AppFactory",
    "from chatgpt_tool_hub.engine.parser import parse_output": "from chatgpt_tool_hub.engine.parser import parse_output",
    "create_app + list tools (no LLM call)": (
        "from chatgpt_tool_hub.apps import AppFactory\n"
        "from chatgpt_tool_hub.testing import ScriptedLLM\n"
        "AppFactory().create_app(llm=ScriptedLLM([]))"),
}
HEAVY = ("torch", "transformers", "openai", "tiktoken", "rich", "requests", "jsonschema", "pydantic")
ANSWER = "Hello!"

# ---- part 1: imports ---------------------------------------------------------------------------------------


def timed(code: str) -> tuple[float, float]:
    """(wall, CPU) seconds of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(runs: int) -> None:
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in ["(nothing)", *STATEMENTS]}
    for _ in range(runs):
        samples["(nothing)"].append(timed("pass"))
        for label, code in STATEMENTS.items():
            samples[label].append(timed(code))
    base_wall = statistics.median(w for w, _ in samples["(nothing)"])
    base_cpu = statistics.median(c for _, c in samples["(nothing)"])
    print(f"interpreter start-up: {base_wall * 1000:.0f} ms wall, {base_cpu * 1000:.0f} ms CPU (subtracted below)")
    for label, code in STATEMENTS.items():
        wall = statistics.median(w for w, _ in samples[label]) - base_wall
        cpu = statistics.median(c for _, c in samples[label]) - base_cpu
        probe = code + "\nimport sys\nprint(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
        loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        heavy = loaded.stdout.strip() or "none"
        print(f"{label:<58} {wall * 1000:7.1f} ms wall {cpu * 1000:7.1f} ms CPU   heavy modules loaded: {heavy}")


# ---- part 2: the first answer --------------------------------------------------------------------------------


class Server:
    """A chat-completions server on 127.0.0.1 that answers every request with ``ANSWER`` (a ``final_answer``
    tool call when the request offers that tool) and counts the requests."""

    def __init__(self) -> None:
        counts = self.counts = {"POST": 0, "GET": 0}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the handler's name
                counts["GET"] += 1
                self._send({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "owned_by": "me"}]})

            def do_POST(self) -> None:  # noqa: N802
                counts["POST"] += 1
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                tools = [t.get("function", {}).get("name") for t in body.get("tools") or ()]
                message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
                finish = "stop"
                if "final_answer" in tools:
                    message = {"role": "assistant", "content": None, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "final_answer", "arguments": json.dumps({"answer": ANSWER})}}]}
                    finish = "tool_calls"
                self._send({"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                            "model": body.get("model") or "gpt-4o-mini",
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# Each system's child: define make() (build an agent) and ask(agent) -> str, both through the real client.
# The child measures from its first import; an empty line separates the setup from the measured code.
SYSTEMS: dict[str, tuple[str, str]] = {
    "chatgpt_tool_hub": ("chatgpt_tool_hub", """
from chatgpt_tool_hub.apps import AppFactory
factory = AppFactory()
def make():
    return factory.create_app(llm_api_base_url=URL, llm_api_key="x", model_name="gpt-4o-mini")
def ask(app):
    return app.ask("hi")
"""),
    "langchain": ("langgraph", """
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
@tool
def get_weather(city: str) -> str:
    \"\"\"The weather in a city.\"\"\"
    return "sunny in " + city
def make():
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=URL, api_key="x", max_retries=0)
    return create_react_agent(llm, [get_weather])
def ask(agent):
    return agent.invoke({"messages": [("user", "hi")]})["messages"][-1].content
"""),
    "smolagents": ("smolagents", """
from smolagents import OpenAIServerModel, ToolCallingAgent, tool
@tool
def get_weather(city: str) -> str:
    \"\"\"The weather in a city.

    Args:
        city: the city
    \"\"\"
    return "sunny in " + city
def make():
    model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=URL, api_key="x")
    return ToolCallingAgent(tools=[get_weather], model=model, max_steps=2, verbosity_level=0)
def ask(agent):
    return str(agent.run("hi"))
"""),
    "openai-agents": ("agents", """
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
set_tracing_disabled(True)
@function_tool
def get_weather(city: str) -> str:
    \"\"\"The weather in a city.\"\"\"
    return "sunny in " + city
def make():
    client = AsyncOpenAI(base_url=URL, api_key="x", max_retries=0)
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
    return Agent(name="a", instructions="Answer briefly.", tools=[get_weather], model=model)
def ask(agent):
    return str(Runner.run_sync(agent, "hi").final_output)
"""),
}

CHILD = """
import time
_wall, _cpu = time.perf_counter(), time.process_time()
import gc, json, os, sys
URL = sys.argv[1]
APPS = int(sys.argv[2])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
{code}
first = ask(make())
out = {{"wall": time.perf_counter() - _wall, "cpu": time.process_time() - _cpu, "rss": rss(), "answers": [first],
        "loaded": [m for m in {heavy!r} if m in sys.modules]}}
if APPS:
    kept = []
    gc.collect()
    before = rss()
    for _ in range(APPS):
        agent = make()
        out["answers"].append(ask(agent))
        kept.append(agent)
    gc.collect()
    out["rss_per_app"] = (rss() - before) / APPS
    import tracemalloc
    tracemalloc.start()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    for _ in range(APPS):
        agent = make()
        out["answers"].append(ask(agent))
        kept.append(agent)
    gc.collect()
    out["heap_per_app"] = (tracemalloc.get_traced_memory()[0] - held) / APPS
print("RESULT " + json.dumps(out))
"""


def installed(module: str) -> bool:
    probe = subprocess.run([sys.executable, "-c", f"import importlib.util, sys; "
                            f"sys.exit(importlib.util.find_spec({module!r}) is None)"], capture_output=True)
    return probe.returncode == 0


def first_answer(server: Server, name: str, apps: int) -> dict:
    # a file, not -c: smolagents' @tool reads its function's source
    script = os.path.join(_scratch(), f"run_{name.replace('-', '_')}.py")
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(CHILD.format(code=SYSTEMS[name][1], heavy=HEAVY))
    posts, gets = server.counts["POST"], server.counts["GET"]
    done = subprocess.run([sys.executable, script, server.url, str(apps)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"}, cwd=_scratch())
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    wrong = [a for a in result["answers"] if a.strip() != ANSWER]
    if wrong:
        raise RuntimeError(f"{name} answered {wrong[0]!r}, not {ANSWER!r}")
    calls = 1 + 2 * apps
    result["requests"] = (server.counts["POST"] - posts) / calls
    result["probes"] = (server.counts["GET"] - gets) / calls
    return result


_SCRATCH: list[str] = []


def _scratch() -> str:
    """A folder for the children to run in (workspaces, caches), removed at exit."""
    if not _SCRATCH:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="first-answer-")
        atexit.register(shutil.rmtree, folder, True)
        _SCRATCH.append(folder)
    return _SCRATCH[0]


def first_answers(rounds: int, apps: int) -> int:
    names = [name for name, (module, _) in SYSTEMS.items() if installed(module)]
    missing = [name for name in SYSTEMS if name not in names]
    if missing:
        print(f"not installed, left out: {', '.join(missing)}")
    server = Server()
    results: dict[str, list[dict]] = {name: [] for name in names}
    errors = 0
    try:
        for round_no in range(rounds):
            last = round_no == rounds - 1
            for name in names:  # interleaved: one run of each system per round
                try:
                    results[name].append(first_answer(server, name, apps if last else 0))
                except Exception as exc:  # noqa: BLE001 - counted, reported, and the exit status says so
                    errors += 1
                    print(f"ERROR {exc}", file=sys.stderr)
    finally:
        server.close()
    print(f"\nfirst answer: import + build + answer 'hi', fresh interpreters, median of {rounds} interleaved rounds;"
          f" per agent: {apps} more built and asked in the same process")
    print(f"{'system':<18} {'CPU ms':>8} {'wall ms':>8} {'RSS MiB':>8} {'requests':>9} {'probes':>7} "
          f"{'RSS/agent KiB':>14} {'heap/agent KiB':>15}  loaded")
    for name in names:
        runs = results[name]
        if not runs:
            continue
        per_app = next((r for r in reversed(runs) if "rss_per_app" in r), {})

        def median(key: str, runs: list[dict] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        rss_app = f"{per_app['rss_per_app'] / 1024:.0f}" if per_app else "-"
        heap_app = f"{per_app['heap_per_app'] / 1024:.0f}" if per_app else "-"
        print(f"{name:<18} {median('cpu') * 1000:8.0f} {median('wall') * 1000:8.0f} {median('rss') / 2**20:8.1f} "
              f"{median('requests'):9.1f} {median('probes'):7.1f} {rss_app:>14} {heap_app:>15}  "
              f"{','.join(runs[-1]['loaded']) or 'none'}")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the first answer")
    parser.add_argument("--apps", type=int, default=10, help="further agents per system for the per-agent memory")
    parser.add_argument("--runs", type=int, default=RUNS, help="interpreters per import statement")
    parser.add_argument("--skip-imports", action="store_true", help="only the first answer")
    args = parser.parse_args()
    if not args.skip_imports:
        imports(args.runs)
    errors = first_answers(max(1, args.rounds), max(0, args.apps))
    if errors:
        print(f"\n{errors} error(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

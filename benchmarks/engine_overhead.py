"""Cost per tool step of an agent run, each engine through its real client, against one scripted LLM server.

The benchmark starts one scripted OpenAI-compatible chat-completions server (benchmarks/_scripted_llm.py)
on 127.0.0.1 in its own process. Every conversation asks for N steps; the server answers "call the echo
tool" N times, then a final answer, deciding each reply from the request's messages (it counts the echo
results in them), as ReAct text for a request without ``tools`` and as native tool calls for one with.
It waits ``--latency`` seconds before each reply: 0 by default, so the figures are the clients' own cost
plus the HTTP round trips on loopback.

Sides, each built the way its users build it, once per N, then run for every round:

* chatgpt_tool_hub, text: ``AppFactory().create_app(tools_list=[echo], llm_api_base_url=...)`` (the
  OpenAI-compatible client, ``tool_calling="text"``), ``app.run(question, chat_history=[])``;
* chatgpt_tool_hub, native: the same with ``tool_calling="native"``;
* LangChain classic ``AgentExecutor`` + ``create_react_agent`` over langchain-openai's ``ChatOpenAI`` (ReAct text);
* LangChain ``create_agent`` over ``ChatOpenAI`` (native tool calls);
* the OpenAI Agents SDK: ``Agent`` + ``OpenAIChatCompletionsModel`` + ``Runner.run_sync`` (native, tracing off);
* pydantic-ai: ``Agent(OpenAIChatModel(...)).run_sync`` (native);
* smolagents: ``ToolCallingAgent`` over ``OpenAIModel`` (native; its final answer is a ``final_answer`` call).

Every echo tool returns ``pong#<input>`` in-process. A peer that is not installed is skipped with a line
saying how to install it.

Rounds are interleaved: each round runs every side once (in a rotated order), after one warm-up run per
side. Printed per side and N (N = 1, 10, 50; 200 with ``--long``), all divided by N, nothing subtracted:

* wall: median over rounds of the run's wall time (``app.run`` / ``invoke`` / ``run_sync`` from call to return);
* client CPU: median over rounds of ``time.process_time()`` of this process over the run (every thread);
* server CPU: the scripted server's CPU time over that side's runs (every thread's /proc schedstat), summed,
  divided by the steps;
* requests: HTTP requests the server answered per run (chat completions, plus any ``GET /models`` probe);
* errors: runs that raised, ended without ``done`` or made a number of echo calls other than N.

The process exits 1 when any run failed.

    python benchmarks/engine_overhead.py [--rounds 5] [--steps 1,10,50] [--long] [--latency 0.0] [--only ours,langchain]

Needs ``pip install "chatgpt-tool-hub[clients,server]"`` (starlette, uvicorn, langchain-openai, openai-agents);
the other peers: ``pip install langchain-classic langchain smolagents "pydantic-ai-slim[openai]"``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from _scripted_llm import FINAL, echo_result, question, start_server

KEY = "sk-scripted"
MODEL = "scripted"


@dataclass
class Calls:
    n: int = 0

    def echo(self, text: str) -> str:
        self.n += 1
        return echo_result(text)


Runner = Callable[[str], str]  # question -> final output


@dataclass
class Side:
    name: str
    mode: str  # "text" or "native"
    build: Callable[[str, int, Calls], Runner]  # (base_url, steps, calls) -> runner
    install: str  # what to pip install when it is missing
    probe: Callable[[], None]  # raises ImportError when the side is not installed


@dataclass
class Figures:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    requests: int = 0
    runs: int = 0
    steps: int = 0
    errors: int = 0
    first_error: str = ""


# ---- the sides ----------------------------------------------------------------------------------------


def _ours(mode: str):
    def build(base_url: str, steps: int, calls: Calls) -> Runner:
        from chatgpt_tool_hub.apps import AppFactory
        from chatgpt_tool_hub.tools import tool

        @tool(name="echo", description="Echo the input back.")
        def echo(text: str) -> str:
            """Echo the input back.

            Args:
                text: what to echo
            """
            return calls.echo(text)

        app = AppFactory().create_app(tools_list=[echo], no_default=True, llm_api_base_url=base_url,
                                      llm_api_key=KEY, model_name=MODEL, tool_calling=mode,
                                      think_depth=steps, max_llm_calls=steps + 5, max_tool_calls=steps + 5,
                                      max_retries=0)

        def run(q: str) -> str:
            return app.run(q, chat_history=[]).output
        return run
    return build


def _probe_ours() -> None:
    import starlette  # noqa: F401

    import chatgpt_tool_hub.llm.openai_client  # noqa: F401


def _lc_classic(base_url: str, steps: int, calls: Calls) -> Runner:
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.prompts import PromptTemplate
    from langchain_core.tools import Tool as LCTool
    from langchain_openai import ChatOpenAI

    prompt = PromptTemplate.from_template(
        "Answer the question. You have these tools:\n{tools}\n\nUse this format:\nThought: ...\n"
        "Action: one of [{tool_names}]\nAction Input: ...\nObservation: ...\n... then\n"
        "Thought: I now know the final answer\nFinal Answer: ...\n\nQuestion: {input}\nThought:{agent_scratchpad}")
    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key=KEY, temperature=0, max_retries=0)
    tools = [LCTool(name="echo", func=calls.echo, description="Echo the input back.")]
    executor = AgentExecutor(agent=create_react_agent(llm, tools, prompt), tools=tools,
                             max_iterations=steps + 2)

    def run(q: str) -> str:
        return str(executor.invoke({"input": q})["output"])
    return run


def _probe_lc_classic() -> None:
    import langchain_classic.agents  # noqa: F401
    import langchain_openai  # noqa: F401


def _lc_agent(base_url: str, steps: int, calls: Calls) -> Runner:
    from langchain.agents import create_agent
    from langchain_core.tools import tool as lc_tool
    from langchain_openai import ChatOpenAI

    @lc_tool
    def echo(text: str) -> str:
        """Echo the input back."""
        return calls.echo(text)

    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key=KEY, temperature=0, max_retries=0)
    agent = create_agent(llm, [echo])
    config = {"recursion_limit": 2 * steps + 10}

    def run(q: str) -> str:
        out = agent.invoke({"messages": [{"role": "user", "content": q}]}, config=config)
        return str(out["messages"][-1].content)
    return run


def _probe_lc_agent() -> None:
    import langchain_openai  # noqa: F401
    from langchain.agents import create_agent  # noqa: F401


def _openai_agents(base_url: str, steps: int, calls: Calls) -> Runner:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, function_tool
    from agents import Runner as AgentsRunner
    from openai import AsyncOpenAI

    @function_tool
    def echo(text: str) -> str:
        """Echo the input back."""
        return calls.echo(text)

    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=AsyncOpenAI(base_url=base_url, api_key=KEY,
                                                                              max_retries=0))
    agent = Agent(name="bench", instructions="Use the echo tool as told.", tools=[echo], model=model)
    config = RunConfig(tracing_disabled=True)

    def run(q: str) -> str:
        return str(AgentsRunner.run_sync(agent, q, max_turns=steps + 2, run_config=config).final_output)
    return run


def _probe_openai_agents() -> None:
    import agents  # noqa: F401


def _pydantic_ai(base_url: str, steps: int, calls: Calls) -> Runner:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=KEY))
    agent = Agent(model, instructions="Use the echo tool as told.")

    @agent.tool_plain
    def echo(text: str) -> str:
        """Echo the input back."""
        return calls.echo(text)

    limits = UsageLimits(request_limit=steps + 5)

    def run(q: str) -> str:
        return str(agent.run_sync(q, usage_limits=limits).output)
    return run


def _probe_pydantic_ai() -> None:
    import pydantic_ai.models.openai  # noqa: F401


def _smolagents(base_url: str, steps: int, calls: Calls) -> Runner:
    import warnings

    from smolagents import LogLevel, OpenAIModel, ToolCallingAgent
    from smolagents import tool as smol_tool

    warnings.filterwarnings("ignore", message="Function 'echo' has decorators other than @tool")

    @smol_tool
    def echo(text: str) -> str:
        """Echo the input back.

        Args:
            text: what to echo
        """
        return calls.echo(text)

    model = OpenAIModel(model_id=MODEL, api_base=base_url, api_key=KEY)
    agent = ToolCallingAgent(tools=[echo], model=model, max_steps=steps + 2, verbosity_level=LogLevel.OFF)

    def run(q: str) -> str:
        return str(agent.run(q))
    return run


def _probe_smolagents() -> None:
    import smolagents  # noqa: F401


SIDES = [
    Side("chatgpt_tool_hub text", "text", _ours("text"), '"chatgpt-tool-hub[server]"', _probe_ours),
    Side("langchain AgentExecutor", "text", _lc_classic, "langchain-classic langchain-openai", _probe_lc_classic),
    Side("chatgpt_tool_hub native", "native", _ours("native"), '"chatgpt-tool-hub[server]"', _probe_ours),
    Side("langchain create_agent", "native", _lc_agent, "langchain langchain-openai", _probe_lc_agent),
    Side("openai-agents", "native", _openai_agents, "openai-agents", _probe_openai_agents),
    Side("pydantic-ai", "native", _pydantic_ai, '"pydantic-ai-slim[openai]"', _probe_pydantic_ai),
    Side("smolagents", "native", _smolagents, "smolagents", _probe_smolagents),
]


# ---- measuring ----------------------------------------------------------------------------------------


def _one(runner: Runner, calls: Calls, steps: int, server, fig: Figures | None) -> None:
    calls.n = 0
    served_before = server.served()
    server_before = server.cpu_s()
    cpu_before = time.process_time()
    started = time.perf_counter()
    error = ""
    try:
        output = runner(question(steps))
        if FINAL not in output:
            error = f"final output {output[:80]!r}"
        elif calls.n != steps:
            error = f"{calls.n} echo calls, expected {steps}"
    except Exception as exc:  # a failed run is counted, then reported
        error = f"{type(exc).__name__}: {exc}"[:300]
        if fig is not None and not fig.first_error:
            traceback.print_exc(file=sys.stderr)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    server_cpu = server.cpu_s() - server_before
    served_after = server.served()
    if fig is None:  # the warm-up run
        if error:
            raise RuntimeError(error)
        return
    if error:
        fig.errors += 1
        fig.first_error = fig.first_error or error
        return
    fig.wall.append(wall / steps)
    fig.cpu.append(cpu / steps)
    fig.server_cpu += server_cpu
    fig.requests += sum(served_after.values()) - sum(served_before.values())
    fig.runs += 1
    fig.steps += steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured runs per side and N (default 5)")
    parser.add_argument("--steps", default="1,10,50", help="comma-separated N (default 1,10,50)")
    parser.add_argument("--long", action="store_true", help="also N = 200")
    parser.add_argument("--latency", type=float, default=0.0, help="server seconds before each reply (default 0)")
    parser.add_argument("--only", default="", help="comma-separated substrings of side names to run")
    args = parser.parse_args(argv)
    step_counts = [int(s) for s in args.steps.split(",") if s] + ([200] if args.long else [])

    sides = []
    for side in SIDES:
        if args.only and not any(part in side.name for part in args.only.split(",")):
            continue
        try:
            side.probe()
        except ImportError as exc:
            print(f"skipped {side.name}: not installed ({exc.name}); pip install {side.install}")
            continue
        sides.append(side)

    server = start_server(args.latency)
    errors = 0
    try:
        print(f"scripted OpenAI-compatible server on 127.0.0.1 in its own process, latency {args.latency * 1e3:.0f} ms; "
              f"{args.rounds} interleaved rounds after one warm-up run per side")
        print("per tool step (run / N), medians over rounds; server CPU = its /proc CPU over that side's runs / steps")
        header = f"{'N':>4} {'side':<26} {'mode':<6} {'wall ms':>9} {'client CPU ms':>14} {'server CPU ms':>14} {'requests':>8} {'errors':>6}"
        for steps in step_counts:
            print()
            print(header)
            runners: dict[str, tuple[Runner, Calls]] = {}
            figures: dict[str, Figures] = {}
            for side in sides:
                calls = Calls()
                figures[side.name] = fig = Figures()
                try:
                    runner = side.build(server.base_url, steps, calls)
                    _one(runner, calls, steps, server, None)  # warm-up: imports, connections, caches
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    fig.errors += 1
                    fig.first_error = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                runners[side.name] = (runner, calls)
            names = list(runners)
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)] if names else []
                for name in order:
                    runner, calls = runners[name]
                    _one(runner, calls, steps, server, figures[name])
            for side in sides:
                fig = figures[side.name]
                errors += fig.errors
                if fig.wall:
                    print(f"{steps:>4} {side.name:<26} {side.mode:<6} {statistics.median(fig.wall) * 1e3:9.3f} "
                          f"{statistics.median(fig.cpu) * 1e3:14.3f} {fig.server_cpu / fig.steps * 1e3:14.3f} "
                          f"{fig.requests / fig.runs:8.1f} {fig.errors:>6}")
                else:
                    print(f"{steps:>4} {side.name:<26} {side.mode:<6} {'-':>9} {'-':>14} {'-':>14} {'-':>8} {fig.errors:>6}")
                if fig.first_error:
                    print(f"     first error: {fig.first_error}")
    finally:
        server.stop()
    if errors:
        print(f"{errors} failed runs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

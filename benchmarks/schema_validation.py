"""Argument validation per call, beside the peers in the same run.

Three tools, each given the same valid JSON object (a ``dict``) over and over:

* ``small``: one string and one optional integer;
* ``six``: six parameters (string, integer, number, enum, array of strings, optional boolean);
* ``nested``: an object holding a string, a list of objects (an integer and an optional number each), an
  optional boolean, and an optional enum beside it.

Sides, each through the call its users make:

* chatgpt_tool_hub: ``Tool.parse_arguments`` (unknown names, coercion, the compiled checker with the
  full route behind it), on a tool made by ``@tool`` from annotated parameters;
* jsonschema, one ``Draft202012Validator`` built once, ``iter_errors`` per call;
* jsonschema, a validator built per call (what chatgpt_tool_hub 1.0 did);
* pydantic, a ``TypeAdapter`` of the same parameters as ``TypedDict`` s (extra keys forbidden), reused,
  ``validate_python`` per call (lax mode, its default).

The sides take turns: each round runs every side once, ``--calls`` calls each, in an order that rotates
from round to round, and the figure is the median over ``--rounds`` rounds of wall time (``perf_counter``)
and CPU time of this process (``process_time``) per call. ``x pydantic`` divides a side's median wall time,
and its median CPU time, by pydantic's from the same run.

Before timing, every side is asked about the same probe inputs (the valid one, a missing required name, an
unknown name, a value of the wrong type, a value outside an enum, and a bad nested value); the run fails
(exit 1) when a side answers "valid" where another answers "invalid", or when a timed call fails.

    python benchmarks/schema_validation.py [--calls 5000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable, Literal

import jsonschema
from typing_extensions import NotRequired, TypedDict

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.tools import Tool, tool

try:
    from pydantic import ConfigDict, TypeAdapter, ValidationError
except ImportError:  # pragma: no cover - pydantic comes with openai
    TypeAdapter = None  # type: ignore[assignment,misc]



# ---- the three tools, and the same parameters as TypedDicts for pydantic ----------------------------------


@tool(name="search")
def search(query: str, limit: int = 10) -> str:
    return query


@tool(name="forecast")
def forecast(city: str, days: int, lat: float, unit: Literal["c", "f"], tags: list[str], alerts: bool = False) -> str:
    return city


def _forbid_extra(*classes: Any) -> None:
    if TypeAdapter is not None:
        for cls in classes:
            cls.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]


class Point(TypedDict):
    x: int
    y: NotRequired[float]


class Shape(TypedDict):
    name: str
    points: list[Point]
    closed: NotRequired[bool]


_forbid_extra(Point, Shape)  # before the tool is made: its schema says so too


@tool(name="draw")
def draw(shape: Shape, colour: Literal["red", "blue"] = "red") -> str:
    return shape["name"]


class SearchArgs(TypedDict):
    query: str
    limit: NotRequired[int]


class ForecastArgs(TypedDict):
    city: str
    days: int
    lat: float
    unit: Literal["c", "f"]
    tags: list[str]
    alerts: NotRequired[bool]


class DrawArgs(TypedDict):
    shape: Shape
    colour: NotRequired[Literal["red", "blue"]]


_forbid_extra(SearchArgs, ForecastArgs, DrawArgs)

CASES: list[tuple[str, Tool, Any, dict, list[dict]]] = [
    ("small", search, SearchArgs, {"query": "weather in Paris", "limit": 5},
     [{}, {"query": "x", "page": 2}, {"query": ["x"]}, {"query": "x", "limit": [1]}]),
    ("six", forecast, ForecastArgs,
     {"city": "Paris", "days": 3, "lat": 48.85, "unit": "c", "tags": ["a", "b"], "alerts": True},
     [{"city": "Paris"}, {"city": "Paris", "days": 3, "lat": 1.0, "unit": "c", "tags": [], "hail": True},
      {"city": ["Paris"], "days": 3, "lat": 1.0, "unit": "c", "tags": []},
      {"city": "Paris", "days": 3, "lat": 1.0, "unit": "k", "tags": []},
      {"city": "Paris", "days": 3, "lat": 1.0, "unit": "c", "tags": [["a"]]}]),
    ("nested", draw, DrawArgs,
     {"shape": {"name": "triangle", "points": [{"x": 0, "y": 0.5}, {"x": 4}, {"x": 2, "y": 3.0}], "closed": True},
      "colour": "blue"},
     [{"colour": "red"}, {"shape": {"name": "t", "points": [], "filled": True}},
      {"shape": {"name": "t", "points": [{"x": "abc"}]}}, {"shape": {"name": "t", "points": []}, "colour": "green"},
      {"shape": {"name": "t", "points": [{"x": 1, "z": 2}]}}]),
]


# ---- the sides ----------------------------------------------------------------------------------------------


def sides(built: Tool, typed: Any) -> list[tuple[str, Callable[[dict], Any], Callable[[dict], bool]]]:
    """``(label, call, verdict)``: ``call`` is what is timed, ``verdict`` says valid or not for the probes."""
    schema = built.parameters
    assert schema is not None
    reused = jsonschema.Draft202012Validator(schema)

    def ours(arguments: dict) -> bool:
        try:
            built.parse_arguments(arguments)
        except ToolInputError:
            return False
        return True

    found: list[tuple[str, Callable[[dict], Any], Callable[[dict], bool]]] = [
        ("chatgpt_tool_hub parse_arguments", built.parse_arguments, ours),
        ("jsonschema, one validator", lambda a: _no_errors(reused, a), lambda a: reused.is_valid(a)),
        ("jsonschema, validator per call", lambda a: _no_errors(jsonschema.Draft202012Validator(schema), a),
         lambda a: reused.is_valid(a)),
    ]
    if TypeAdapter is not None:
        adapter = TypeAdapter(typed)

        def theirs(arguments: dict) -> bool:
            try:
                adapter.validate_python(arguments)
            except ValidationError:
                return False
            return True

        found.append(("pydantic TypeAdapter (TypedDict)", adapter.validate_python, theirs))
    return found


def _no_errors(validator: Any, arguments: dict) -> None:
    for error in validator.iter_errors(arguments):
        raise ValueError(error.message)


# ---- measuring -----------------------------------------------------------------------------------------------


def disagreements(name: str, built: Tool, typed: Any, valid: dict, invalid: list[dict]) -> list[str]:
    problems = []
    for probe, expected in [(valid, True), *((p, False) for p in invalid)]:
        for label, _, verdict in sides(built, typed):
            if verdict(dict(probe)) is not expected:
                problems.append(f"{name}: {label} says {'invalid' if expected else 'valid'} for {probe}")
    return problems


def measure(built: Tool, typed: Any, arguments: dict, calls: int, rounds: int
            ) -> tuple[dict[str, tuple[float, float]], int]:
    """Per side, the median wall and CPU microseconds per call; and the count of calls that failed."""
    runners = sides(built, typed)
    wall: dict[str, list[float]] = {label: [] for label, _, _ in runners}
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in runners}
    failed = 0
    for _label, call, _ in runners:  # a warm-up call each
        call(arguments)
    for round_ in range(rounds):
        shift = round_ % len(runners)
        for label, call, _ in runners[shift:] + runners[:shift]:
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            try:
                for _ in range(calls):
                    call(arguments)
            except Exception as exc:  # noqa: BLE001 - counted and shown, the run fails
                failed += 1
                print(f"  ! {label}: {type(exc).__name__}: {exc}", file=sys.stderr)
            cpu[label].append((time.process_time() - cpu_start) / calls * 1e6)
            wall[label].append((time.perf_counter() - wall_start) / calls * 1e6)
    return {label: (statistics.median(wall[label]), statistics.median(cpu[label])) for label in wall}, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args(argv)

    problems = [p for name, built, typed, valid, invalid in CASES
                for p in disagreements(name, built, typed, valid, invalid)]
    failed = 0
    print(f"argument validation per call: median of {options.rounds} interleaved rounds x {options.calls:,} calls")
    for name, built, typed, valid, _ in CASES:
        figures, errors = measure(built, typed, valid, options.calls, options.rounds)
        failed += errors
        peer_wall, peer_cpu = figures.get("pydantic TypeAdapter (TypedDict)", (0.0, 0.0))
        print(f"\n{name}: {len(valid)} parameters given, {built.parameters and len(built.parameters['properties'])} "
              f"declared")
        print(f"  {'side':<36} {'wall us':>9} {'cpu us':>9} {'x pydantic wall':>16} {'cpu':>8}")
        for label, (wall_us, cpu_us) in figures.items():
            ratios = (f"{wall_us / peer_wall:15.2f}x {cpu_us / peer_cpu:7.2f}x" if peer_wall and peer_cpu
                      else f"{'-':>16} {'-':>8}")
            print(f"  {label:<36} {wall_us:9.2f} {cpu_us:9.2f} {ratios}")
    probes = sum(1 + len(invalid) for *_, invalid in CASES)
    print(f"\nprobes: {probes} inputs asked of every side, {len(problems)} disagreements")
    for problem in problems:
        print(f"DISAGREEMENT {problem}", file=sys.stderr)
    if problems or failed:
        print(f"\n{len(problems)} disagreements, {failed} failed rounds", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Argument validation per call, beside the peers in the same run.

One tool with six parameters (string, integer, number, enum, array of strings, optional boolean) gets
the same valid JSON object N times:

* chatgpt_tool_hub: ``Tool.parse_arguments`` (unknown names, coercion, the validator built once);
* jsonschema, a validator built per call (what chatgpt_tool_hub 1.0 did);
* jsonschema, one validator reused;
* pydantic, a ``TypeAdapter`` of a ``TypedDict`` reused.

    python benchmarks/schema_validation.py
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Literal

from typing_extensions import TypedDict

import jsonschema

from chatgpt_tool_hub.tools import tool

N = 20_000
ARGS = {"city": "Paris", "days": 3, "lat": 48.85, "unit": "c", "tags": ["a", "b"], "alerts": True}


@tool(name="forecast")
def forecast(city: str, days: int, lat: float, unit: Literal["c", "f"], tags: list[str], alerts: bool = False) -> str:
    return city


def per_call(fn) -> float:
    fn()
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(N):
            fn()
        runs.append((time.perf_counter() - started) / N * 1e6)
    return statistics.median(runs)


def main() -> int:
    schema = forecast.parameters
    reused = jsonschema.Draft202012Validator(schema)

    class Forecast(TypedDict):
        city: str
        days: int
        lat: float
        unit: Literal["c", "f"]
        tags: list[str]
        alerts: bool

    rows = [("chatgpt_tool_hub parse_arguments", lambda: forecast.parse_arguments(ARGS)),
            ("jsonschema, validator per call", lambda: list(jsonschema.Draft202012Validator(schema).iter_errors(ARGS))),
            ("jsonschema, one validator", lambda: list(reused.iter_errors(ARGS)))]
    try:
        from pydantic import TypeAdapter

        adapter = TypeAdapter(Forecast)
        rows.append(("pydantic TypeAdapter (TypedDict)", lambda: adapter.validate_python(ARGS)))
    except ImportError:
        pass
    print(f"argument validation per call, median of 5 x {N:,} calls")
    for label, fn in rows:
        print(f"  {label:<36} {per_call(fn):8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

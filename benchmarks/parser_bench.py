"""Accuracy and speed of the ReAct output parser, side by side with LangChain's.

Run: ``python benchmarks/parser_bench.py [--corpus PATH] [--rounds N] [--reps N] [--verbose]``

Both sides are called as users call them: ``chatgpt_tool_hub.engine.parser.parse_output(text)`` and
LangChain's ``ReActSingleInputOutputParser().parse(text)`` (install it with
``pip install langchain-classic``; it is used only here, never by the package), both without tool names.

Accuracy is scored on ``tests/fixtures/react_outputs.jsonl`` with the comparison the tests use: an
action must have the same tool and (stripped) input, a finish the same (stripped) output, and an
expected error must be a parser error.

Speed is the time per parse over the corpus, in two parts: "well-formed" (the replies written in the
prompt's own format, which the parser reads on its fast path) and "malformed/recovery" (the rest, which
need its recovery rules). Each round times chatgpt_tool_hub then LangChain, ``--reps`` passes over the
part each, for ``--rounds`` rounds; CPU time (``time.process_time``) and wall time
(``time.perf_counter``) are summed over the rounds. "speed vs langchain" is LangChain's CPU time
divided by ours: 1.0x is as fast, 0.5x takes twice its time.

Long hostile outputs are timed once per parser: both at 1,000 repetitions, and chatgpt_tool_hub also at
100,000 (LangChain's regex is quadratic there).

Exit status: 1 when chatgpt_tool_hub is below 100% on the corpus or raises anything other than
``OutputParserError`` (each such exception counts as an error), 2 when LangChain is not installed,
else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chatgpt_tool_hub.engine.parser import Action, Finish, _fast_parse, parse_output  # noqa: E402
from chatgpt_tool_hub.errors import OutputParserError  # noqa: E402

DEFAULT_CORPUS = ROOT / "tests" / "fixtures" / "react_outputs.jsonl"
INSTALL_HINT = "pip install langchain-classic"
Reader = Callable[[str], tuple]


def ours(text: str) -> tuple:
    """A reading: ("action", tool, input) | ("finish", output) | ("error", feedback) | ("crash", exception)."""
    try:
        result = parse_output(text)
    except OutputParserError as exc:
        return ("error", exc.feedback)
    except Exception as exc:  # noqa: BLE001 - anything else is a defect, counted as an error
        return ("crash", f"{type(exc).__name__}: {exc}")
    if isinstance(result, Action):
        return ("action", result.tool, result.tool_input)
    assert isinstance(result, Finish)
    return ("finish", result.output)


def langchain_reader() -> Reader | None:
    """LangChain's ReAct parser as a reader, or None when it is not installed."""
    try:
        from langchain_classic.agents.output_parsers import ReActSingleInputOutputParser
    except ImportError:
        try:
            from langchain.agents.output_parsers import ReActSingleInputOutputParser
        except ImportError:
            return None
    from langchain_core.agents import AgentAction

    parser = ReActSingleInputOutputParser()

    def read(text: str) -> tuple:
        try:
            result = parser.parse(text)
        except Exception as exc:  # noqa: BLE001 - any exception is LangChain's "error" answer
            return ("error", str(exc) or type(exc).__name__)
        if isinstance(result, AgentAction):
            return ("action", result.tool, result.tool_input)
        return ("finish", result.return_values.get("output", ""))

    return read


def _strip(value):
    return value.strip() if isinstance(value, str) else value


def correct(reading: tuple, expect: dict) -> bool:
    kind = expect["kind"]
    if kind == "error":
        return reading[0] == "error" and bool(str(reading[1]).strip())
    if kind == "finish":
        return reading[0] == "finish" and reading[1].strip() == expect["output"].strip()
    return (reading[0] == "action" and reading[1] == expect["tool"]
            and _strip(reading[2]) == _strip(expect["input"]))


def _timed(read: Reader, texts: list[str], reps: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) for ``reps`` passes over ``texts``."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(reps):
        for text in texts:
            read(text)
    return time.process_time() - cpu, time.perf_counter() - wall


def interleaved(readers: dict[str, Reader], texts: list[str], rounds: int, reps: int) -> dict[str, tuple[float, float]]:
    """Microseconds per parse (CPU, wall) for each reader, timed A, B, A, B... round by round."""
    totals = {name: [0.0, 0.0] for name in readers}
    for _ in range(rounds):
        for name, read in readers.items():
            cpu, wall = _timed(read, texts, reps)
            totals[name][0] += cpu
            totals[name][1] += wall
    parses = max(1, rounds * reps * len(texts))
    return {name: (cpu * 1e6 / parses, wall * 1e6 / parses) for name, (cpu, wall) in totals.items()}


HOSTILE: dict[str, Callable[[int], str]] = {  # long hostile outputs, as in tests/test_parser*.py
    "'Action: x\\n' x n": lambda n: "Action: x\n" * n,
    "'{' x n": lambda n: "{" * n,
    "'Action: t(' + '(' x n": lambda n: "Action: t(" + "(" * n + ")",
    "'Action: a' + ' action' x n/2": lambda n: "Action: a" + " action" * (n // 2),
    "'\\u200b' x n + action": lambda n: "\u200b" * n + "Action: x",
    "'Final Answer\\n' x n": lambda n: "Final Answer\n" * n,
}


def _once_ms(read: Reader, text: str) -> tuple[float, tuple]:
    """Milliseconds for one parse, and the reading."""
    started = time.perf_counter()
    reading = read(text)
    return (time.perf_counter() - started) * 1000, reading


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args.add_argument("--rounds", type=int, default=20, help="timing rounds, each parser once per round")
    args.add_argument("--reps", type=int, default=100, help="passes over a part of the corpus per round")
    args.add_argument("--verbose", action="store_true", help="list every case either parser gets wrong")
    opts = args.parse_args(argv)
    if not opts.corpus.is_file():
        print(f"corpus not found: {opts.corpus}")
        return 1
    cases = [json.loads(line) for line in opts.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    readers: dict[str, Reader] = {"chatgpt_tool_hub": ours}
    lc = langchain_reader()
    if lc is not None:
        readers["langchain ReActSingleInput"] = lc
    else:
        print(f"langchain: not installed; to compare, run: {INSTALL_HINT}")

    well_formed = [c for c in cases if _fast_parse(c["text"], []) is not None]
    recovery = [c for c in cases if c not in well_formed]
    print(f"corpus: {opts.corpus} ({len(cases)} cases: {len(well_formed)} well-formed, "
          f"{len(recovery)} malformed/recovery)")
    print(f"timing: {opts.rounds} interleaved rounds x {opts.reps} passes per part\n")
    wrong: dict[str, list[str]] = {}
    crashed: list[str] = []  # chatgpt_tool_hub raised something other than OutputParserError
    for name, read in readers.items():
        readings = {c["id"]: read(c["text"]) for c in cases}
        wrong[name] = [c["id"] for c in cases if not correct(readings[c["id"]], c["expect"])]
        if name == "chatgpt_tool_hub":
            crashed += [case_id for case_id, r in readings.items() if r[0] == "crash"]

    print(f"{'part':<20} {'parser':<28} {'accuracy':>14} {'CPU us/parse':>13} {'wall us/parse':>14}")
    ratios = []
    for part, part_cases in (("well-formed", well_formed), ("malformed/recovery", recovery), ("all", cases)):
        ids = {c["id"] for c in part_cases}
        times = interleaved(readers, [c["text"] for c in part_cases], opts.rounds, opts.reps)
        for name in readers:
            right = len(ids) - len(ids.intersection(wrong[name]))
            cpu, wall = times[name]
            print(f"{part:<20} {name:<28} {right:>3}/{len(ids):<3} {100 * right / max(1, len(ids)):5.1f}% "
                  f"{cpu:>13.2f} {wall:>14.2f}")
        if lc is not None:
            ratio = times["langchain ReActSingleInput"][0] / times["chatgpt_tool_hub"][0]
            ratios.append(f"{part} {ratio:.2f}x")
    if ratios:
        print(f"speed vs langchain (its CPU time / ours): {', '.join(ratios)}")

    print("\nlong hostile outputs, ms each (one parse):")
    print(f"  {'output':<36} {'ours n=1k':>10} {'langchain n=1k':>15} {'ours n=100k':>12}")
    for label, make in HOSTILE.items():
        small, large = make(1_000), make(100_000)
        peer = f"{_once_ms(lc, small)[0]:>15.1f}" if lc is not None else f"{'-':>15}"
        (ms_small, r_small), (ms_large, r_large) = _once_ms(ours, small), _once_ms(ours, large)
        crashed += [f"{label} n={n}" for n, r in ((1_000, r_small), (100_000, r_large)) if r[0] == "crash"]
        print(f"  {label:<36} {ms_small:>10.1f} {peer} {ms_large:>12.1f}")

    for name, misses in wrong.items():
        if misses:
            print(f"{name} wrong on: {', '.join(misses)}")
    if opts.verbose:
        for case in cases:
            for name, read in readers.items():
                if case["id"] in wrong[name]:
                    print(f"\n[{case['id']}] {name}: expected {case['expect']}, got {read(case['text'])!r:.200}")
    errors = len(set(wrong["chatgpt_tool_hub"]) | set(crashed))
    if crashed:
        print(f"chatgpt_tool_hub crashed on: {', '.join(crashed)}")
    print(f"chatgpt_tool_hub errors: {errors} (wrong or crashed)")
    if errors:
        return 1
    return 0 if lc is not None else 2


if __name__ == "__main__":
    raise SystemExit(main())

"""Accuracy and speed of the ReAct output parser, side by side with LangChain's.

Run: ``python benchmarks/parser_bench.py [--corpus PATH] [--seconds S] [--verbose]``

Accuracy is scored on ``tests/fixtures/react_outputs.jsonl`` with the comparison the
tests use: an action must have the same tool and (stripped) input, a finish the same
(stripped) output, and an expected error must be a parser error. LangChain's
``ReActSingleInputOutputParser`` is installed with ``pip install langchain-classic``;
it is used only here, never by the package.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chatgpt_tool_hub.engine.parser import Action, Finish, parse_output  # noqa: E402
from chatgpt_tool_hub.errors import OutputParserError  # noqa: E402

DEFAULT_CORPUS = ROOT / "tests" / "fixtures" / "react_outputs.jsonl"


def ours(text: str) -> tuple:
    """A reading: ("action", tool, input) | ("finish", output) | ("error", feedback)."""
    try:
        result = parse_output(text)
    except OutputParserError as exc:
        return ("error", exc.feedback)
    if isinstance(result, Action):
        return ("action", result.tool, result.tool_input)
    assert isinstance(result, Finish)
    return ("finish", result.output)


def langchain_reader():
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


def speed(read, texts: list[str], seconds: float) -> float:
    """Parses per second over the corpus, repeated for about ``seconds``."""
    count, start = 0, time.perf_counter()
    while True:
        for text in texts:
            read(text)
        count += len(texts)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed


# long hostile outputs (as in tests/test_parser*.py, which only check that parsing ends)
PATHOLOGICAL = {
    "'Action: x\\n' x 100k": "Action: x\n" * 100_000,
    "'{' x 100k": "{" * 100_000,
    "'Action: t(' + '(' x 100k": "Action: t(" + "(" * 100_000 + ")",
    "'Action: a' + ' action' x 50k": "Action: a" + " action" * 50_000,
    "'\\u200b' x 100k + action": "\u200b" * 100_000 + "Action: x",
    "'Final Answer\\n' x 100k": "Final Answer\n" * 100_000,
}


def pathological_ms(read) -> list[tuple[str, float]]:
    """Milliseconds per long hostile output."""
    rows = []
    for label, text in PATHOLOGICAL.items():
        started = time.perf_counter()
        read(text)
        rows.append((label, (time.perf_counter() - started) * 1000))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args.add_argument("--seconds", type=float, default=2.0, help="timing budget per parser")
    args.add_argument("--verbose", action="store_true", help="list every case either parser gets wrong")
    opts = args.parse_args(argv)
    if not opts.corpus.is_file():
        print(f"corpus not found: {opts.corpus}")
        return 1
    cases = [json.loads(line) for line in opts.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [case["text"] for case in cases]
    readers = {"chatgpt_tool_hub": ours}
    lc = langchain_reader()
    if lc is not None:
        readers["langchain ReActSingleInput"] = lc

    print(f"corpus: {opts.corpus} ({len(cases)} cases)")
    print(f"{'parser':<28} {'accuracy':>14} {'parses/s':>12}")
    wrong: dict[str, list[str]] = {}
    for name, read in readers.items():
        misses = [case["id"] for case in cases if not correct(read(case["text"]), case["expect"])]
        wrong[name] = misses
        right = len(cases) - len(misses)
        rate = speed(read, texts, opts.seconds)
        print(f"{name:<28} {right:>3}/{len(cases):<3} {100 * right / len(cases):5.1f}% {rate:>12,.0f}")
    if lc is None:
        print("langchain: not installed; to compare, run: pip install langchain-classic")
    print("long hostile outputs (chatgpt_tool_hub), ms each:")
    for label, ms in pathological_ms(ours):
        print(f"  {label:<36} {ms:>9.1f}")
    for name, misses in wrong.items():
        if misses:
            print(f"{name} wrong on: {', '.join(misses)}")
    if opts.verbose:
        for case in cases:
            for name, read in readers.items():
                if case["id"] in wrong[name]:
                    print(f"\n[{case['id']}] {name}: expected {case['expect']}, got {read(case['text'])!r:.200}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long the secret redactor takes: building it, and ``redact`` on about 1 MB of text with 5 secrets.

The text mixes prose, Python code, JSON and log lines, with the secrets in it
a few dozen times in the spellings the redactor knows (as configured,
percent-encoded, base64 inside a ``KEY=...`` line, hex, upper-case, spaced
out). Every figure is the best of several runs; also printed: how many masks
were made, and the worst case for the spaced-out forms -- texts of 0.5, 1 and
2 MB of nothing but separators and the secrets' characters, where a
backtracking pattern would blow up (the time grows with the text, no faster).

    python benchmarks/redact.py [path/to/redact.py]

The optional path measures another copy of the module (``redact.py`` imports
nothing from the package, so an older version can be compared side by side).
"""

from __future__ import annotations

import base64
import importlib.util
import random
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
SECRETS = ["sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX", "ghp_Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed",
           "AKIAIOSFODNN7EXAMPLE", "correct-horse-battery-staple", "xoxb-123456789012-abcdefABCDEF"]
PROSE = ("The service answered with a list of objects, newest first; each carries an id, a name and the time it "
         "was changed. Filters combine with AND, and an unknown filter is an error rather than ignored. ")
CODE = ("def fetch(url: str, *, timeout: float = 15) -> dict:\n    reply = session.get(url, timeout=timeout)\n"
        "    reply.raise_for_status()\n    return reply.json()\n")
JSON = '{"id": 4821, "name": "storage-bucket-7", "tags": ["a", "b"], "size": 1048576, "ok": true}\n'
LOG = "2026-01-05 12:00:01 INFO request GET /v1/things?page=3 took 41 ms (200)\n"


def load(path: str | None) -> ModuleType:
    """The redactor module at ``path``, or the package's own."""
    source = Path(path) if path else ROOT / "chatgpt_tool_hub" / "redact.py"
    spec = importlib.util.spec_from_file_location("redact_under_test", source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaks(secret: str) -> list[str]:
    """The secret as text may carry it."""
    return [secret, quote(secret, safe=""), base64.b64encode(f"API_KEY={secret}\n".encode()).decode(),
            secret.encode().hex(), secret.upper(), " ".join(secret), secret[::-1]]


def text(size: int = 1_000_000, seed: int = 7) -> str:
    rng = random.Random(seed)
    blocks, total = [], 0
    while total < size:
        block = rng.choice((PROSE, CODE, JSON, LOG))
        if rng.random() < 0.01:
            block = f"token: {rng.choice(leaks(rng.choice(SECRETS)))}\n" + block
        blocks.append(block)
        total += len(block)
    return "".join(blocks)


def best(func, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    module = load(sys.argv[1] if len(sys.argv) > 1 else None)
    sample = text()
    build = best(lambda: (re.purge(), module.Redactor(SECRETS)), runs=20)  # not from re's cache
    redactor = module.Redactor(SECRETS)
    masked = redactor.redact(sample)
    hostile = "".join(random.Random(1).choice(" -_.:,\n" + "".join(SECRETS)) for _ in range(2_000_000))
    print(f"module: {sys.argv[1] if len(sys.argv) > 1 else 'chatgpt_tool_hub/redact.py'}")
    print(f"build Redactor(5 secrets): {build * 1000:.2f} ms")
    print(f"redact {len(sample) / 1e6:.2f} MB mixed text: {best(lambda: redactor.redact(sample)) * 1000:.0f} ms "
          f"({masked.count(module.MASK)} masks)")
    for size in (500_000, 1_000_000, 2_000_000):  # linear: twice the text, twice the time
        part = hostile[:size]
        print(f"redact {size / 1e6:.2f} MB of separators and secret characters: "
              f"{best(lambda part=part: redactor.redact(part), runs=3) * 1000:.0f} ms")
    print(f"redact {len(sample) / 1e6:.2f} MB with no secrets configured: "
          f"{best(lambda: module.Redactor().redact(sample)) * 1000:.2f} ms")


if __name__ == "__main__":
    main()

"""The prepared GPU check runs on the CPU too (``--cpu``: tiny models), so it is known to work before a GPU
machine runs it: every step prints its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_gpu_check_runs_on_the_cpu_with_every_step():
    pytest.importorskip("diffusers")
    from chatgpt_tool_hub.experts import EXPERT_TOOLS

    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "this step ended with status" not in out, out[-3000:]
    for heading in ("== environment", "== 2. every expert tool", "== 4. all diffusion tools", "== 5. cold models"):
        assert heading in out, heading
    rows = {line.split()[0] for line in out.splitlines() if line.split() and line.split()[0] in EXPERT_TOOLS}
    assert rows == set(EXPERT_TOOLS), sorted(set(EXPERT_TOOLS) - rows)  # every tool measured
    assert "separate / shared = " in out and "0/2 processes with failures" in out

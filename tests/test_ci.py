"""The test suite's own set-up: the README's test command is what CI runs, the default run leaves out the slow
and browser tests (and a later ``-m`` brings them back), a stage without tests does not fail CI, and no test
imports a benchmark's module."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"
SLOW_FILE = "tests/test_gpu_check.py"  # holds one test, marked slow


def readme_test_command() -> str:
    """The one line of the code block under "Run the test suite:" in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"Run the test suite:\s*```bash\n(.*?)```", text, re.S)
    assert match, "README.md has no 'Run the test suite:' code block"
    lines = match.group(1).strip().splitlines()
    assert len(lines) == 1, "the README's test command is one copyable line"
    return lines[0]


def test_ci_runs_the_readme_test_command_as_written():
    command = readme_test_command()
    assert command.endswith(".venv/bin/python -m pytest -q")
    lines = CI.read_text(encoding="utf-8").splitlines()
    assert any(line == command or line.startswith(command + " || ") for line in lines), command


def collect(*args: str) -> subprocess.CompletedProcess:
    """``pytest --collect-only`` of the slow test's file, with the repository's configuration (and no plugin
    or conftest.py beyond what the markers need: a quick start)."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "pytest_timeout", "--noconftest", *args, SLOW_FILE],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_the_default_run_leaves_out_slow_tests_and_a_later_m_brings_them_back():
    default = collect()
    assert default.returncode == 5 and "1 deselected" in default.stdout, default.stdout  # 5: nothing collected
    chosen = collect("-m", "slow or browser")
    assert chosen.returncode == 0 and "1 test collected" in chosen.stdout, chosen.stdout
    everything = collect("-m", "")
    assert everything.returncode == 0 and "1 test collected" in everything.stdout, everything.stdout


def ci_function_status(status: int) -> int:
    """The exit status of .ci/run's ``tolerate_no_tests`` for a pytest that ended with ``status``."""
    script = CI.read_text(encoding="utf-8")
    function = re.search(r"^tolerate_no_tests\(\) \{\n.*?^\}\n", script, re.S | re.M)
    assert function, ".ci/run defines tolerate_no_tests"
    body = f"set -euo pipefail\n{function.group(0)}(exit {status}) || tolerate_no_tests $?\necho reached\n"
    proc = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=60)
    assert ("reached" in proc.stdout) == (proc.returncode == 0)
    return proc.returncode


def test_a_ci_stage_without_tests_passes_and_failures_still_fail():
    assert ci_function_status(5) == 0  # no tests collected
    assert ci_function_status(1) == 1  # failed tests
    assert ci_function_status(2) == 2  # interrupted / usage error


LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader"}


def test_no_test_imports_a_benchmark_module():
    """Benchmarks measure; tests check behaviour. A test may run a benchmark script in a subprocess, never
    import it (its module-level set-up, sys.path changes and globals would leak into the test process)."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call):
                func = node.func
                names = [f"loader {func.attr}"] if isinstance(func, ast.Attribute) and func.attr in LOADERS else []
                names += [f"loader {func.id}"] if isinstance(func, ast.Name) and func.id in LOADERS else []
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names
                          if name.split(".")[0] == "benchmarks" or name.startswith("loader ")]
    assert offenders == []


def test_every_marker_the_default_run_leaves_out_runs_in_a_ci_stage():
    """A marker excluded by addopts (``not slow``, ``not clients`` ...) is chosen by some ``-m`` of .ci/run."""
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    addopts = re.search(r'^addopts = "(.*)"$', config, re.M)
    assert addopts, "pyproject.toml sets addopts"
    left_out = set(re.findall(r"not (\w+)", addopts.group(1)))
    assert {"slow", "browser", "clients", "realmodel", "openwebui"} <= left_out
    chosen = " ".join(re.findall(r'pytest -q -m "?([^"|]+)"?', CI.read_text(encoding="utf-8")))
    assert all(re.search(rf"\b{marker}\b", chosen) for marker in left_out), (left_out, chosen)

"""The public API is typed: mypy reads tests/typing/public_api.py with no error (``assert_type`` holds)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # a cold mypy cache reads the whole package
@pytest.mark.skipif(shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists(),
                    reason="mypy is not installed (pip install mypy)")
def test_public_api_types_are_what_users_see():
    mypy = str(Path(sys.executable).parent / "mypy") if (Path(sys.executable).parent / "mypy").exists() else "mypy"
    out = subprocess.run([mypy, "--no-error-summary",
                          str(ROOT / "tests" / "typing" / "public_api.py")],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr

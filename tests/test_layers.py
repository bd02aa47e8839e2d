"""Import discipline: light imports, and imports that only point down the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"

# layer of each module path prefix (relative to the package): imports only point down
LAYERS = [
    ("cli", 6), ("demo", 6), ("console", 6), ("server", 6), ("web", 6),
    ("apps", 5),
    ("planner", 4),
    ("tools/builtin", 3), ("tools/plugins", 3), ("tools/subtree", 3), ("experts", 3),
    ("engine", 2),
    ("llm", 1), ("tools/base", 1), ("tools/context", 1), ("tools/schema", 1), ("tools/signature", 1), ("tools/registry", 1), ("tools/tool_register", 1), ("tools/all_tool_list", 1), ("tools/__init__", 1),
    ("testing", 1),
    ("errors", 0), ("config", 0), ("events", 0), ("textutil", 0), ("jsontext", 0), ("redact", 0), ("loadlock", 0), ("__init__", 0),
]


def layer_of(rel: str) -> int:
    for prefix, layer in LAYERS:
        if rel == prefix or rel.startswith(prefix + "/") or rel == prefix + ".py" or rel.startswith(prefix + "."):
            return layer
    raise AssertionError(f"no layer for {rel}")


def module_rel(module: str) -> str:
    return module.replace("chatgpt_tool_hub.", "", 1).replace(".", "/")


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names]
            found.extend([module] + names)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
    return [m for m in found if m.startswith("chatgpt_tool_hub")]


def resolve(module: str) -> str | None:
    rel = module_rel(module)
    for candidate in (PACKAGE / f"{rel}.py", PACKAGE / rel / "__init__.py"):
        if candidate.exists():
            return str(candidate.relative_to(PACKAGE)).replace(".py", "")
    return None


def test_imports_only_point_down():
    problems = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE)).replace(".py", "")
        mine = layer_of(rel)
        for module in imports_of(path):
            target = resolve(module)
            if target is None:
                continue
            theirs = layer_of(target)
            if theirs > mine:
                problems.append(f"{rel} (L{mine}) imports {target} (L{theirs})")
    assert problems == []


def test_engine_never_imports_clients_tools_or_torch():
    for path in (PACKAGE / "engine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("openai", "torch", "transformers", "tools.builtin", "llm.openai_client", "llm.local"):
            assert f"import {forbidden}" not in text and f"from {forbidden}" not in text \
                and f".{forbidden} import" not in text, (path.name, forbidden)


@pytest.mark.parametrize("statement", [
    "import chatgpt_tool_hub",
    "from chatgpt_tool_hub.apps import AppFactory",
    "from chatgpt_tool_hub.tools.tool_register import main_tool_register; main_tool_register.get_registered_tool_names()",
])
def test_light_imports(statement):
    code = statement + "\nimport sys\nprint(sorted(m for m in ('torch', 'transformers', 'openai', 'tiktoken') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_is_a_giant():
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 650, f"{path.relative_to(PACKAGE)} has {lines} lines: split it"

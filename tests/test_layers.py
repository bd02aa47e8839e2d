"""Import discipline: light imports, and imports that only point down the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"

# layer of each module path prefix (relative to the package): imports only point down
LAYERS = [
    ("__init__", 6),  # the package root is the lazy facade over the public API: nothing inside imports it
    ("cli", 6), ("demo", 6), ("console", 6), ("server", 6), ("web", 6),
    ("apps", 5),
    ("planner", 4),
    ("tools/builtin", 3), ("tools/plugins", 3), ("tools/subtree", 3), ("experts", 3),
    ("engine", 2),
    ("llm", 1), ("runtime", 1), ("run", 1), ("tools/base", 1), ("tools/context", 1), ("tools/schema", 1), ("tools/checker", 1), ("tools/signature", 1), ("tools/registry", 1), ("tools/tool_register", 1), ("tools/all_tool_list", 1), ("tools/external", 1), ("tools/__init__", 1),
    ("testing", 1),
    ("errors", 0), ("config", 0), ("events", 0), ("textutil", 0), ("jsontext", 0), ("redact", 0), ("loadlock", 0),
]


def layer_of(rel: str) -> int:
    for prefix, layer in LAYERS:
        if rel == prefix or rel.startswith(prefix + "/") or rel == prefix + ".py" or rel.startswith(prefix + "."):
            return layer
    raise AssertionError(f"no layer for {rel}")


def module_rel(module: str) -> str:
    return module.replace("chatgpt_tool_hub.", "", 1).replace(".", "/")


L3_PACKAGES = ("tools/builtin", "tools/plugins", "tools/subtree", "experts")
GROUND = {"errors", "config", "events", "textutil", "jsontext", "redact", "loadlock"}


def package_of(rel: str) -> str:
    """The package a module belongs to for the sideways and private-import rules (``tools/builtin``, ``experts`` ...)."""
    parts = rel.split("/")
    if parts[0] == "tools" and len(parts) > 2:
        return "tools/" + parts[1]
    if parts[0] == "runtime" and len(parts) > 2:
        return "runtime/" + parts[1]
    return parts[0]


def imported_names(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for each project name a module imports (``name`` is "" for ``import x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((a.name, "") for a in node.names)
    return [(m, n) for m, n in found if m.startswith("chatgpt_tool_hub")]


def target_of(module: str, name: str) -> str | None:
    """The module file an import reaches: ``from pkg import submodule`` reaches the submodule."""
    if name:
        sub = resolve(f"{module}.{name}")
        if sub is not None:
            return sub
    return resolve(module)


def string_imports(path: Path) -> list[str]:
    """Project modules named in string constants (``importlib.import_module("chatgpt_tool_hub.x")``,
    lazy tables): entry points (``module:attr``) and logger names are not imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    logger_names = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getLogger" for arg in node.args}
    found = []
    for node in ast.walk(tree):
        if id(node) not in logger_names and isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if value.startswith("chatgpt_tool_hub.") and " " not in value and ":" not in value:
                found.append(value)
    return found


def all_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, str(path.relative_to(PACKAGE)).replace(".py", "")


def imports(only: str = "") -> Iterator[tuple[str, str, str]]:
    """``(importer, imported module, name)`` for every project import of the package's modules
    (those whose path starts with ``only``); the imported module is resolved to its file (``from pkg
    import submodule`` reaches the submodule), imports of nothing in the package are left out."""
    for path, rel in all_modules():
        if rel.startswith(only):
            for module, name in imported_names(path):
                target = target_of(module, name)
                if target is not None:
                    yield rel, target, name


def resolve(module: str) -> str | None:
    rel = module_rel(module)
    for candidate in (PACKAGE / f"{rel}.py", PACKAGE / rel / "__init__.py"):
        if candidate.exists():
            return str(candidate.relative_to(PACKAGE)).replace(".py", "")
    return None


def test_imports_only_point_down():
    problems = []
    for path, rel in all_modules():
        mine = layer_of(rel)
        for module, name in imported_names(path):
            # both the package that is imported from and the submodule named (its __init__ runs too)
            for target in {resolve(module), target_of(module, name)} - {None}:
                theirs = layer_of(target)
                if theirs > mine:
                    problems.append(f"{rel} (L{mine}) imports {target} (L{theirs})")
    assert problems == []


def test_l3_packages_never_import_each_other():
    """Tools, plugins, subtrees and experts share code only through lower layers (``runtime``, ``llm`` ...)."""
    problems = [f"{rel} imports {target}" for rel, target, _ in imports()
                if package_of(rel) in L3_PACKAGES and package_of(target) in L3_PACKAGES
                and package_of(target) != package_of(rel)]
    assert problems == []


def test_no_private_module_or_name_crosses_a_package():
    """``_private`` modules and names are their package's own: another package imports public names."""
    problems = []
    for rel, target, name in imports():
        if package_of(target) == package_of(rel):
            continue
        private_module = any(part.startswith("_") and part != "__init__" for part in target.split("/"))
        private_name = name.startswith("_") and not name.startswith("__")
        if private_module or private_name:
            problems.append(f"{rel} imports {target}:{name}")
    assert problems == []


def test_runtime_imports_only_the_ground_floor():
    """The safety kernel sits below every user of it: errors, config, textutil ... and itself."""
    problems = [f"{rel} imports {target}" for rel, target, _ in imports("runtime/")
                if not target.startswith("runtime") and target.split("/")[0] not in GROUND]
    assert problems == []


def test_string_imports_only_point_down():
    """A module named in a string (lazy imports, tables) follows the same rule as an import statement."""
    problems = []
    for path, rel in all_modules():
        mine = layer_of(rel)
        for module in string_imports(path):
            target = resolve(module)
            if target is not None and layer_of(target) > mine:
                problems.append(f"{rel} names {target} (L{layer_of(target)}) in a string")
    assert problems == []


def test_the_layer_rules_catch_what_they_forbid(tmp_path, monkeypatch):
    """The checks above are not vacuous: a planted sideways, private and upward string import is found."""
    fake = tmp_path / "chatgpt_tool_hub"
    for rel, text in {
        "tools/builtin/bad.py": "from ..plugins.summary import SummaryTool\nfrom ...runtime._hidden import x\n",
        "tools/plugins/summary.py": "SummaryTool = 1\n",
        "runtime/_hidden.py": "x = 1\n",
        "runtime/up.py": "from ..tools.base import Tool\n",
        "tools/base.py": "Tool = 1\n",
        "llm/lazy.py": "import importlib\nimportlib.import_module('chatgpt_tool_hub.apps.factory')\n",
        "apps/factory.py": "",
    }.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    for check in (test_l3_packages_never_import_each_other, test_no_private_module_or_name_crosses_a_package,
                  test_runtime_imports_only_the_ground_floor, test_string_imports_only_point_down):
        with pytest.raises(AssertionError):
            check()


def test_engine_never_imports_clients_tools_or_torch():
    for path in (PACKAGE / "engine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("openai", "torch", "transformers", "tools.builtin", "llm.openai_client", "llm.local"):
            assert f"import {forbidden}" not in text and f"from {forbidden}" not in text \
                and f".{forbidden} import" not in text, (path.name, forbidden)


def test_nothing_inside_imports_the_facade():
    """``chatgpt_tool_hub/__init__.py`` sits above everything (it names the public API lazily)."""
    offenders = [rel for path, rel in all_modules() if rel != "__init__"
                 for module, name in imported_names(path) if module == "chatgpt_tool_hub" and name != "__version__"]
    assert offenders == []


def test_the_facade_names_the_public_api_without_loading_it():
    code = ("import sys, chatgpt_tool_hub as hub\n"
            "assert {'AppFactory', 'App', 'PlannerApp', 'tool', 'Tool', 'ScriptedLLM', 'RunResult'} <= set(dir(hub))\n"
            "assert 'chatgpt_tool_hub.apps' not in sys.modules\n"
            "from chatgpt_tool_hub import AppFactory, ScriptedLLM, tool\n"
            "from chatgpt_tool_hub.apps import AppFactory as Same\n"
            "assert AppFactory is Same\n"
            "app = AppFactory().create_app(llm=ScriptedLLM(['AI: hello']), no_default=True)\n"
            "assert app.ask('hi') == 'hello'\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    hub = __import__("chatgpt_tool_hub")
    assert set(hub.__all__) == {"__version__", *hub._PUBLIC}  # every lazily named object is listed, and only those
    for name in hub.__all__:
        assert getattr(hub, name) is not None, name


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

"""Cold models under concurrency: heavy imports once under a lock, loads one at a time, broken models never kept.

The races: (1) a thread importing a lazy library (transformers, diffusers)
while another one imports it gets a half-initialised module ("module
'transformers' has no attribute 'pipeline'"); (2) two loads at once undo each
other's process-wide patches and leave weights on the ``meta`` device ("Tensor
on device meta is not on the expected device"), and that broken model used to
stay cached. The fresh-process test reproduces both the way the planner meets
them (benchmarks/cold_loads.py runs it over 20 processes; here the script's child runs in a subprocess,
its module is never imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, UserError
from chatgpt_tool_hub.runtime.models import loading
from chatgpt_tool_hub.runtime.models.manager import ModelManager

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "cold_loads.py"


# ---- 1. heavy imports: once, under one lock, completely -----------------------------------------

DELAY = 0.4


@pytest.fixture
def racing_library(tmp_path, monkeypatch):
    """A lazy library like transformers: attributes ``alpha``/``beta`` import submodules that import each
    other. Two threads resolving them at once lock ``a`` and ``b`` in opposite orders; Python breaks that
    cycle by handing one thread a half-initialised module, so its call fails (an AttributeError)."""
    name = f"racing_lib_{abs(hash(tmp_path)) % 10**8}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent("""
        def __getattr__(attribute):  # lazy attributes, as in transformers' _LazyModule
            if attribute == "alpha":
                from .a import alpha
                return alpha
            if attribute == "beta":
                from .b import beta
                return beta
            raise AttributeError(attribute)
    """))
    for mine, other in (("a", "b"), ("b", "a")):
        (package / f"{mine}.py").write_text(textwrap.dedent(f"""
            import time
            time.sleep({DELAY})
            from . import {other}
            time.sleep({DELAY})
            CONST = "{mine}"

            def {"alpha" if mine == "a" else "beta"}():
                return CONST + {other}.CONST
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def resolve_in_two_threads(get_module) -> list[str]:
    """Thread 1 calls ``alpha()``, thread 2 ``beta()``, at the same moment; the errors they met."""
    barrier = threading.Barrier(2)
    errors: list[str] = []

    def call(attribute):
        def run():
            barrier.wait()
            try:
                getattr(get_module(), attribute)()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        return run

    threads = [threading.Thread(target=call(a)) for a in ("alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_the_racing_library_breaks_plain_concurrent_imports(racing_library):
    """The control: without the lock the race is real (what import_heavy must prevent)."""
    from importlib import import_module

    errors = resolve_in_two_threads(lambda: import_module(racing_library))
    assert errors and all("AttributeError" in e for e in errors), errors


def test_import_heavy_imports_once_under_a_lock_and_resolves_lazy_attributes(racing_library):
    errors = resolve_in_two_threads(lambda: loading.import_heavy(racing_library, resolve=("alpha", "beta")))
    assert errors == []
    module = sys.modules[racing_library]
    assert loading.import_heavy(racing_library) is module  # later calls: the same module, no re-import
    assert module.alpha() == "ab" and module.beta() == "ba"


def test_import_backend_returns_extras_after_torch_and_transformers(racing_library):
    torch, transformers, extra = loading.import_backend((racing_library,))
    assert torch.__name__ == "torch" and transformers.__name__ == "transformers"
    assert extra is sys.modules[racing_library]
    assert hasattr(transformers, "pipeline")
    assert len(loading.import_backend()) == 2


def test_a_missing_heavy_library_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(UserError, match=r'text-to-image needs diffusers, which is not installed .*'
                                        r'pip install "chatgpt-tool-hub\[diffusion\]"'):
        loading.import_heavy("diffusers", needed_by="text-to-image")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match=r'expert tools need torch and transformers.*\[experts\]'):
        loading.import_backend()


# ---- 2. a model left on the meta device is refused with the setting to fix ---------------------------


def test_load_with_refuses_a_model_with_meta_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    manager = ModelManager()
    builds = []

    def build(location, args):
        builds.append(location)
        device = "meta" if len(builds) == 1 else args["device"]
        return {"model": torch.nn.Linear(2, 2, device=device)}

    def load():
        return loading.load_with(build, str(tmp_path), device="cpu", dtype="float32", tool="image-captioning",
                                 setting="image_captioning_model")

    with pytest.raises(ToolExecutionError, match=r"for image-captioning: 2 weight\(s\) stayed on the meta device "
                                                 r"\(Linear.weight, Linear.bias\).*set image_captioning_model"):
        manager.get("k", load)
    assert not manager.is_loaded("k")
    assert manager.get("k", load)["model"].weight.device.type == "cpu"
    assert len(builds) == 2


def test_a_tool_whose_model_stayed_on_meta_says_so_and_loads_again_next_time():
    torch = pytest.importorskip("torch")
    from chatgpt_tool_hub.experts.base import ExpertTool

    class Scale(ExpertTool):
        name = "scale-text"
        task = "text-classification"
        default_model = "example/scale"
        description = "scale-text: test tool"
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        loads = 0

        def load_model(self, device, dtype):
            type(self).loads += 1
            return torch.nn.Linear(2, 2, device="meta" if self.loads == 1 else device)

        def call_local(self, model, *, text):
            return model.weight.device.type

        def render(self, result, *, text):
            return f"ran on {result}"

    tool = Scale(device="cpu", manager=ModelManager())
    with pytest.raises(ToolExecutionError) as caught:
        tool.run({"text": "x"})
    assert str(caught.value).startswith("could not load example/scale text-classification cpu float32: 2 weight(s) "
                                        "stayed on the meta device")
    assert not tool.is_loaded()
    assert tool.run({"text": "x"}) == "ran on cpu" and Scale.loads == 2


# ---- 3. cold tiny models, many threads, several tools -------------------------------------------------


# (tool, manager index): 8 calls, 6 different tools; image-classification twice on one manager (one load for
# both), text-classification once per manager (one load per app); the benchmark's scenario
CALLS = [("image-classification", 0), ("text-classification", 0), ("image-captioning", 0),
         ("object-detection", 0), ("image-classification", 0),
         ("depth-estimation", 1), ("image-segmentation", 1), ("text-classification", 1)]
TOOLS = sorted({name for name, _ in CALLS})
OPTIONS = {"image-captioning": {"max_new_tokens": 8}, "object-detection": {"threshold": 0.0}}


def make_tool(name: str, spec: dict, manager: ModelManager):
    """The expert tool ``name`` on its tiny model, on the CPU, with ``manager``."""
    from importlib import import_module

    from chatgpt_tool_hub.experts import EXPERT_TOOLS

    module, cls = EXPERT_TOOLS[name]
    return getattr(import_module(module), cls)(model=spec["models"][name], device="cpu", manager=manager,
                                               workspace_dir=spec["workspace"], options=OPTIONS.get(name))


def arguments(name: str, spec: dict) -> dict:
    return {"text": "I loved this film"} if name == "text-classification" else {"image": spec["image"]}


def cold_round(spec: dict) -> dict:
    """8 threads call the tools of ``CALLS`` at once on two new (cold) managers, then each tool once more."""
    managers = [ModelManager(), ModelManager()]
    tools = [make_tool(name, spec, managers[which]) for name, which in CALLS]
    barrier = threading.Barrier(len(tools))
    errors: list[str] = []

    def call(index: int) -> None:
        try:
            barrier.wait()
            tools[index].run(arguments(CALLS[index][0], spec))
        except Exception as exc:
            errors.append(f"{CALLS[index][0]}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(tools))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    retry: list[str] = []
    for index, (name, _) in enumerate(CALLS):  # a model that broke in the race must not stay cached
        try:
            tools[index].run(arguments(name, spec))
        except Exception as exc:
            retry.append(f"{name}: {type(exc).__name__}: {exc}")
    return {"errors": errors, "retry_errors": retry, "loads": [m.stats()["loads"] for m in managers]}


def fresh_process(spec: dict) -> dict:
    """The benchmark script's child (a new interpreter that has imported nothing heavy) run on ``spec``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, str(BENCH), "--child", json.dumps({**spec, "threads": len(CALLS)})],
                          capture_output=True, text=True, timeout=300, env=env)
    reports = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and reports, proc.stderr[-2000:]
    return json.loads(reports[-1])


@pytest.fixture(scope="session")
def cold_spec(tmp_path_factory):
    """Tiny models of ``TOOLS`` and a workspace with one picture, built once."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from PIL import Image, ImageDraw

    from chatgpt_tool_hub.experts.tiny import BUILDERS
    from chatgpt_tool_hub.runtime.filenames import ingest_image

    folder = tmp_path_factory.mktemp("cold-loads")
    picture = Image.new("RGB", (96, 64), (30, 120, 200))
    ImageDraw.Draw(picture).ellipse([20, 10, 70, 55], fill=(240, 200, 20))
    workspace = folder / "workspace"
    return {"models": {name: BUILDERS[name](folder / "models" / name) for name in TOOLS},
            "workspace": str(workspace), "image": ingest_image(picture, workspace)}


@pytest.mark.slow
def test_eight_threads_on_cold_tools_in_one_process(cold_spec):
    """The benchmark's round in this process (transformers is already imported here): only the load race
    is left. Three rounds, each with new (cold) managers."""
    for _ in range(3):
        report = cold_round(cold_spec)
        assert report["errors"] == [] and report["retry_errors"] == [], report
        assert report["loads"] == [4, 3]  # one load per model per manager, also when two threads ask for it


@pytest.mark.slow
@pytest.mark.timeout(900)  # 4 interpreters that each import torch and transformers: minutes on a busy machine
def test_fresh_processes_with_cold_models_have_no_failures(cold_spec):
    """4 new interpreters; in each, 8 threads are the first to import transformers and load 6 cold models
    over 2 managers at the same moment, then every tool runs again (no broken model kept)."""
    reports = [fresh_process(cold_spec) for _ in range(4)]
    for report in reports:
        assert report["heavy_before"] == [], report  # building the tools imported nothing heavy
        assert report["errors"] == [] and report["retry_errors"] == [], report
        assert report["loads"] == [4, 3], report


def test_a_plan_of_cold_expert_tools_runs_on_four_workers(cold_spec):
    """The planner's way: one task per tool, all ready at once, 4 workers, cold models of one app."""
    from chatgpt_tool_hub.planner.execute import DagRun
    from chatgpt_tool_hub.planner.plan import Task

    manager = ModelManager()
    tools = {name: make_tool(name, cold_spec, manager) for name in TOOLS}
    tasks = [Task(i, name, (), arguments(name, cold_spec)) for i, name in enumerate(TOOLS)]
    dag = DagRun(tasks, tools, max_workers=4, timeout=120)
    assert dag.wait(180)
    assert {r.tool: r.status for r in dag.results.values()} == dict.fromkeys(TOOLS, "ok"), \
        [r.error for r in dag.results.values()]
    assert manager.stats()["loads"] == len(TOOLS)

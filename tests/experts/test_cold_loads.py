"""Cold models under concurrency: heavy imports once under a lock, loads one at a time, broken models never kept.

The races: (1) a thread importing a lazy library (transformers, diffusers)
while another one imports it gets a half-initialised module ("module
'transformers' has no attribute 'pipeline'"); (2) two loads at once undo each
other's process-wide patches and leave weights on the ``meta`` device ("Tensor
on device meta is not on the expected device"), and that broken model used to
stay cached. The fresh-process test reproduces both the way the planner meets
them (benchmarks/cold_loads.py runs it over 20 processes).
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, UserError
from chatgpt_tool_hub.runtime.models import loading
from chatgpt_tool_hub.runtime.models.manager import ModelManager

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "cold_loads.py"


def bench_module():
    spec = importlib.util.spec_from_file_location("cold_loads_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@pytest.fixture(scope="session")
def cold_spec(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return bench_module().prepare(tmp_path_factory.mktemp("cold-loads"))


def test_eight_threads_on_cold_tools_in_one_process(cold_spec):
    """The child of the benchmark, in this process (transformers is already imported here): only the load
    race is left. Three rounds, each with new (cold) managers."""
    bench = bench_module()
    for _ in range(3):
        report = bench.child(cold_spec)
        assert report["errors"] == [] and report["retry_errors"] == [], report
        assert report["loads"] == [4, 3]  # one load per model per manager, also when two threads ask for it


@pytest.mark.slow
def test_fresh_processes_with_cold_models_have_no_failures(cold_spec):
    """4 new interpreters; in each, 8 threads are the first to import transformers and load 6 cold models
    over 2 managers at the same moment, then every tool runs again (no broken model kept)."""
    bench = bench_module()
    reports = [bench.run_process(cold_spec) for _ in range(4)]
    for report in reports:
        assert report["heavy_before"] == [], report  # building the tools imported nothing heavy
        assert report["errors"] == [] and report["retry_errors"] == [], report
        assert report["loads"] == [4, 3], report


def test_a_plan_of_cold_expert_tools_runs_on_four_workers(cold_spec):
    """The planner's way: one task per tool, all ready at once, 4 workers, cold models of one app."""
    from chatgpt_tool_hub.planner.execute import DagRun
    from chatgpt_tool_hub.planner.plan import Task

    bench = bench_module()
    manager = ModelManager()
    tools = {name: bench.make_tool(name, cold_spec, manager) for name in bench.TOOLS}
    tasks = [Task(i, name, (), bench.arguments(name, cold_spec)) for i, name in enumerate(bench.TOOLS)]
    dag = DagRun(tasks, tools, max_workers=4, timeout=120)
    assert dag.wait(180)
    assert {r.tool: r.status for r in dag.results.values()} == dict.fromkeys(bench.TOOLS, "ok"), \
        [r.error for r in dag.results.values()]
    assert manager.stats()["loads"] == len(bench.TOOLS)

"""A half-precision load switches torch's default dtype for every thread while it builds the model
(transformers and diffusers both call ``torch.set_default_dtype``): a model call running meanwhile in
another thread would make its new tensors in float16. ``CALL_GATE`` keeps such loads and model calls
apart. Reproduced on the CPU with a real transformers load in float16 (what every load is on CUDA)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chatgpt_tool_hub.experts.base import ExpertTool
from chatgpt_tool_hub.loadlock import CALL_GATE
from chatgpt_tool_hub.runtime.models import loading
from chatgpt_tool_hub.runtime.models.manager import ModelManager

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HOLD_S = 1.0  # how long a probe call runs at most


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=8, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(folder)
    return str(folder)


class Probe(ExpertTool):
    """A model call that watches torch's default dtype until ``until`` is set (or HOLD_S passed)."""

    name = "dtype-probe"
    task = "feature-extraction"
    default_model = "example/probe"
    description = "dtype-probe: test tool."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    output_kind = "text"
    hold_s = HOLD_S

    def __init__(self, until: threading.Event, **kwargs: Any):
        super().__init__(**kwargs)
        self.until, self.seen, self.began, self.ended = until, set(), threading.Event(), 0.0
        self.started = 0.0

    def load_model(self, device: str, dtype: str) -> Any:
        return object()

    def call_local(self, model: Any, *, text: str) -> Any:
        self.started = time.perf_counter()
        self.began.set()
        deadline = time.perf_counter() + self.hold_s
        while not self.until.is_set() and time.perf_counter() < deadline:
            self.seen.add(torch.get_default_dtype())
            torch.zeros(4)  # what a model call does: new tensors, in the default dtype
        self.seen.add(torch.get_default_dtype())
        self.ended = time.perf_counter()
        return text

    def render(self, result: Any, *, text: str) -> str:
        return str(result)


class HalfLoad(ExpertTool):
    """A tool whose model is built in float16 through the real loading path (a CUDA tool's load)."""

    name = "half-load"
    task = "feature-extraction"
    default_model = "example/half"
    description = "half-load: test tool."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    output_kind = "text"

    def __init__(self, folder: str, hold: threading.Event | None = None, **kwargs: Any):
        super().__init__(model=folder, **kwargs)
        self.hold, self.build_started, self.build_ended = hold, 0.0, 0.0
        self.building = threading.Event()

    @property
    def dtype(self) -> str:
        return "float16"

    def load_model(self, device: str, dtype: str) -> Any:
        def build(location: str, args: dict) -> Any:
            self.build_started = time.perf_counter()
            self.building.set()
            if self.hold is not None:
                self.hold.wait(HOLD_S * 2)
            model = transformers.BertModel.from_pretrained(location, dtype=args["dtype"])
            self.build_ended = time.perf_counter()
            return model

        return loading.load_with(build, self.model, device=device, dtype=dtype, tool=self.name,
                                 setting="half_load_model")

    def call_local(self, model: Any, *, text: str) -> Any:
        return next(model.parameters()).dtype

    def render(self, result: Any, *, text: str) -> str:
        return str(result)


def _thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_a_half_precision_load_waits_for_the_running_model_call(bert_dir):
    done = threading.Event()
    probe = Probe(done, device="cpu", manager=ModelManager())
    half = HalfLoad(bert_dir, device="cpu", manager=ModelManager())
    calling = _thread(probe.run, "watch")
    assert probe.began.wait(10)
    outputs: list[str] = []
    loading_thread = _thread(lambda: (outputs.append(half.run("x")), done.set()))
    loading_thread.join(30)
    calling.join(30)
    assert outputs == ["torch.float16"]  # the model was built in half precision
    assert probe.seen == {torch.float32}  # ... and the running call never saw the switched default
    assert half.build_started >= probe.ended  # the load waited for the call
    assert torch.get_default_dtype() == torch.float32


def test_a_model_call_waits_while_a_half_precision_load_builds(bert_dir):
    release = threading.Event()
    half = HalfLoad(bert_dir, hold=release, device="cpu", manager=ModelManager())
    probe = Probe(threading.Event(), device="cpu", manager=ModelManager())
    probe.until.set()  # a short call
    probe.load()  # warm: its call needs no load (that would wait for the load lock)
    loading_thread = _thread(half.run, "x")
    assert half.building.wait(10)
    calling = _thread(probe.run, "watch")
    time.sleep(0.2)
    assert not probe.began.is_set()  # held at the gate while the default dtype is switched
    release.set()
    loading_thread.join(30)
    calling.join(30)
    assert probe.began.is_set() and probe.started >= half.build_ended
    assert probe.seen == {torch.float32}


class LoadsInside(Probe):
    """A call that needs another model half-way (as image-to-pose loads its person detector)."""

    name = "loads-inside"

    def __init__(self, half: HalfLoad, **kwargs: Any):
        super().__init__(threading.Event(), **kwargs)
        self.half, self.inner = half, None

    def call_local(self, model: Any, *, text: str) -> Any:
        self.inner = self.half.load()
        return super().call_local(model, text="")


def test_a_load_inside_a_model_call_waits_for_the_other_calls_and_never_deadlocks(bert_dir):
    done = threading.Event()
    other = Probe(done, device="cpu", manager=ModelManager())
    half = HalfLoad(bert_dir, device="cpu", manager=ModelManager())
    inside = LoadsInside(half, device="cpu", manager=ModelManager())
    inside.until.set()
    calling = _thread(other.run, "watch")
    assert other.began.wait(10)
    nested = _thread(lambda: (inside.run("x"), done.set()))
    nested.join(30)
    calling.join(30)
    assert not nested.is_alive() and not calling.is_alive()
    assert next(inside.inner.parameters()).dtype == torch.float16
    assert other.seen == {torch.float32} and half.build_started >= other.ended
    assert CALL_GATE.calls == 0


def test_loads_in_the_default_dtype_do_not_wait_for_calls(bert_dir):
    """On the CPU (float32, torch's default) loads and calls overlap as before."""
    done = threading.Event()
    probe = Probe(done, device="cpu", manager=ModelManager())

    class FullLoad(HalfLoad):
        @property
        def dtype(self) -> str:
            return "float32"

    full = FullLoad(bert_dir, device="cpu", manager=ModelManager())
    probe.hold_s = 120  # ended by ``done`` only: the load may take a while on a busy machine
    calling = _thread(probe.run, "watch")
    assert probe.began.wait(10)
    try:
        assert full.run("x") == "torch.float32"
    finally:
        done.set()
    calling.join(30)
    assert full.build_ended < probe.ended  # built while the call still ran

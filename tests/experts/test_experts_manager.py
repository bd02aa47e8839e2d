"""ModelManager: one load per key under concurrency, LRU eviction under a budget, memory returned."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from chatgpt_tool_hub.runtime.models.manager import ModelManager, default_manager, model_bytes

torch = pytest.importorskip("torch")

LINEAR_BYTES = (256 * 256 + 256) * 4  # nn.Linear(256, 256) in float32: 263,168 bytes
LINEAR_MB = LINEAR_BYTES / 2**20


def linear():
    return torch.nn.Linear(256, 256)


def test_model_bytes():
    assert model_bytes(linear()) == LINEAR_BYTES

    class Pipe:
        model = linear()

    assert model_bytes(Pipe()) == LINEAR_BYTES
    shared = linear()

    class Diffusers:
        components = {"unet": shared, "vae": shared, "scheduler": object()}

    assert model_bytes(Diffusers()) == LINEAR_BYTES  # shared tensors counted once
    assert model_bytes(object()) == 0


def test_eight_threads_load_once():
    manager = ModelManager()
    calls = []
    barrier = threading.Barrier(8)

    def loader():
        calls.append(1)
        time.sleep(0.2)
        return linear()

    results = []

    def worker():
        barrier.wait()
        results.append(manager.get(("m", "task", "cpu"), loader, device="cpu"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len({id(r) for r in results}) == 1 and len(results) == 8
    stats = manager.stats()
    assert (stats["loads"], stats["hits"], stats["resident"]) == (1, 7, 1)
    assert stats["resident_mb"] == round(LINEAR_MB, 3)


def test_lru_eviction_under_budget():
    manager = ModelManager(memory_budget_mb=LINEAR_MB * 2.5)  # fits two
    refs = {}

    def load(name):
        def loader():
            model = linear()
            refs[name] = weakref.ref(model)
            return model
        return manager.get(name, loader)

    load("A")
    load("B")
    load("C")
    assert not manager.is_loaded("A") and manager.is_loaded("B") and manager.is_loaded("C")
    gc.collect()
    assert refs["A"]() is None  # the memory really returned
    assert manager.stats()["evictions"] == 1

    load("B")  # touch B: C is now the least recently used
    load("A")  # reloads A, evicting C
    assert manager.is_loaded("A") and manager.is_loaded("B") and not manager.is_loaded("C")
    stats = manager.stats()
    assert (stats["loads"], stats["hits"], stats["evictions"], stats["resident"]) == (4, 1, 2, 2)
    assert stats["resident_mb"] <= manager.memory_budget_mb


def test_unlimited_budget_keeps_everything():
    manager = ModelManager()
    for name in "ABCDE":
        manager.get(name, linear)
    assert manager.stats()["resident"] == 5 and manager.stats()["evictions"] == 0


def test_model_bigger_than_budget_is_still_loaded():
    manager = ModelManager(memory_budget_mb=LINEAR_MB / 2)
    manager.get("A", linear)
    manager.get("B", linear)
    assert manager.stats()["models"] == ["B"]


def test_size_override_and_explicit_eviction():
    manager = ModelManager(memory_budget_mb=10)
    manager.get("big", object, size_mb=8)
    manager.get("small", object, size_mb=1)
    manager.get("other", object, size_mb=4)
    assert manager.stats()["models"] == ["small", "other"]
    assert manager.evict("small") is True and manager.evict("small") is False
    manager.clear()
    assert manager.stats()["resident"] == 0


def test_failed_load_is_not_cached():
    manager = ModelManager()
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("hub unreachable")
        return linear()

    with pytest.raises(OSError):
        manager.get("m", flaky)
    assert manager.get("m", flaky) is not None
    stats = manager.stats()
    assert (stats["failures"], stats["loads"]) == (1, 1)


def test_call_lock_is_per_model():
    manager = ModelManager()
    manager.get("a", linear)
    manager.get("b", linear)
    assert manager.call_lock("a") is manager.call_lock("a")
    assert manager.call_lock("a") is not manager.call_lock("b")


def test_default_manager_is_shared_but_separate_instances_exist():
    assert default_manager() is default_manager()
    assert ModelManager() is not default_manager()


# ---- races ----------------------------------------------------------------------------------------


def test_call_lock_survives_eviction():
    """Two calls still holding an evicted model must not run on it at the same time (pipelines are not
    thread-safe): the call lock is per key, not per resident entry."""
    manager = ModelManager()
    manager.get("a", linear)
    held = manager.call_lock("a")
    manager.evict("a")  # e.g. another thread's load evicted it while calls still hold the model
    assert manager.call_lock("a") is held
    assert manager.call_lock("a") is manager.call_lock("a")
    manager.get("a", linear)  # reloaded: the same lock serialises old and new holders
    assert manager.call_lock("a") is held


def test_concurrent_loads_of_different_models_stay_within_the_budget():
    """With a budget, loads are one at a time, so two cold models never sit in memory together when only
    one fits (each load first evicts what its model's size needs)."""
    manager = ModelManager(memory_budget_mb=LINEAR_MB * 1.5)  # one fits, two do not
    lock = threading.Lock()
    live: set[str] = set()
    peak = []
    barrier = threading.Barrier(2)

    def loader(name):
        def load():
            model = linear()
            weakref.finalize(model, lambda: (lock.acquire(), live.discard(name), lock.release()))
            time.sleep(0.2)  # loading: the other thread's model may be built meanwhile
            with lock:
                live.add(name)
                peak.append(len(live))
            return model
        return load

    def worker(name):
        barrier.wait()
        manager.get(name, loader(name), size_mb=LINEAR_MB)

    # A and B were loaded once before, so their sizes are known to the manager
    manager.get("A", linear)
    manager.get("B", linear)
    manager.clear()
    gc.collect()
    threads = [threading.Thread(target=worker, args=(n,)) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert max(peak) == 1, peak
    assert manager.stats()["resident"] == 1


def test_expected_size_makes_room_before_the_first_load():
    """A first load whose size is estimated ahead (checkpoint files) evicts before it loads."""
    manager = ModelManager(memory_budget_mb=LINEAR_MB * 1.5)
    manager.get("A", linear)
    seen = []

    def load_b():
        seen.append(manager.is_loaded("A"))
        return linear()

    manager.get("B", load_b, expected_mb=LINEAR_MB)
    assert seen == [False]  # A was evicted before B's load began


# ---- loads are serialised per process -----------------------------------------------------------


class Overlap:
    """Loaders that record how many loads run at once; each waits a little for another to join it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.joined = threading.Event()

    def loader(self, make=linear):
        def load():
            with self.lock:
                self.inside += 1
                self.peak = max(self.peak, self.inside)
                if self.inside > 1:
                    self.joined.set()
            self.joined.wait(0.3)  # without the process lock, the other load joins inside this window
            with self.lock:
                self.inside -= 1
            return make()
        return load


def run_threads(*targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a load is stuck (deadlock)"


@pytest.mark.parametrize("budget", [0, 100])
def test_loads_of_different_models_never_overlap_in_one_manager(budget, caplog):
    manager = ModelManager(memory_budget_mb=budget)
    overlap = Overlap()
    barrier = threading.Barrier(4)

    def worker(name):
        return lambda: (barrier.wait(), manager.get(name, overlap.loader()))

    with caplog.at_level("INFO", logger="chatgpt_tool_hub.experts"):
        run_threads(*(worker(n) for n in "ABCD"))
    assert overlap.peak == 1
    assert manager.stats()["loads"] == 4
    # the log says why a load waited (the others reached the lock while the first one loaded)
    assert "waits for" in caplog.text and "to finish loading (one load at a time per process)" in caplog.text


def test_loads_never_overlap_across_managers():
    """Every app has its own manager; transformers' loads patch process-wide state, so the lock is the
    process's, shared by all managers (and the default one)."""
    managers = [ModelManager(), ModelManager(memory_budget_mb=50), default_manager()]
    overlap = Overlap()
    barrier = threading.Barrier(len(managers))
    key = ("cross-manager", id(overlap))

    def worker(manager):
        return lambda: (barrier.wait(), manager.get(key, overlap.loader()))

    try:
        run_threads(*(worker(m) for m in managers))
    finally:
        default_manager().evict(key)
    assert overlap.peak == 1
    assert [m.stats()["loads"] >= 1 for m in managers] == [True] * 3


def test_eight_threads_two_models_one_load_each():
    manager = ModelManager()
    calls = {"A": 0, "B": 0}
    barrier = threading.Barrier(8)

    def loader(name):
        def load():
            calls[name] += 1
            time.sleep(0.05)
            return linear()
        return load

    results = {"A": set(), "B": set()}

    def worker(name):
        def run():
            barrier.wait()
            results[name].add(id(manager.get(name, loader(name))))
        return run

    run_threads(*(worker("AB"[i % 2]) for i in range(8)))
    assert calls == {"A": 1, "B": 1}
    assert all(len(ids) == 1 for ids in results.values())


def test_a_load_inside_a_load_does_not_deadlock():
    """A loader that loads a part through the manager (a mask model for an inpainting tool, say) while
    another thread waits for that part: the inner load runs at once, the waiting thread finds it cached."""
    manager = ModelManager()
    other_waits = threading.Event()
    part_loads = []

    def load_part():
        part_loads.append(1)
        return linear()

    def load_outer():
        other_waits.set()
        # wait until the other thread holds the part's key lock (it then waits for the process lock)
        for _ in range(200):
            lock = manager._key_locks.get("part")
            if lock is not None and lock.locked():
                break
            time.sleep(0.01)
        return (manager.get("part", load_part), linear())

    def other():
        other_waits.wait(10)
        manager.get("part", load_part)

    run_threads(lambda: manager.get("outer", load_outer), other)
    assert part_loads == [1]
    assert manager.is_loaded("outer") and manager.is_loaded("part")


# ---- models with meta tensors are never cached ------------------------------------------------


def meta_linear():
    return torch.nn.Linear(4, 4, device="meta")


class PipelineLike:
    """What a transformers pipeline looks like to the manager: a ``.model`` and other attributes."""

    def __init__(self, model, vocoder=None):
        self.model = model
        self.tokenizer = "a tokenizer"
        if vocoder is not None:
            self.vocoder = vocoder


class DiffusersLike:
    def __init__(self, **components):
        self.components = components


@pytest.mark.parametrize("make", [
    meta_linear,
    lambda: PipelineLike(meta_linear()),
    lambda: PipelineLike(linear(), vocoder=meta_linear()),
    lambda: DiffusersLike(unet=linear(), vae=meta_linear(), scheduler=object()),
    lambda: (linear(), meta_linear()),
    lambda: {"model": linear(), "head": meta_linear()},
], ids=["module", "pipeline", "pipeline-vocoder", "diffusers", "tuple", "dict"])
def test_a_model_with_meta_tensors_is_not_cached(make):
    from chatgpt_tool_hub.errors import ToolExecutionError

    manager = ModelManager()
    attempts = []

    def loader():
        attempts.append(1)
        return make() if len(attempts) == 1 else linear()

    with pytest.raises(ToolExecutionError, match=r"stayed on the meta device .*was not kept; the next call "
                                                 r"loads it again"):
        manager.get(("m", "task", "cpu", "float32"), loader)
    assert not manager.is_loaded(("m", "task", "cpu", "float32"))
    assert manager.get(("m", "task", "cpu", "float32"), loader) is not None  # the next call loads again
    stats = manager.stats()
    assert (stats["failures"], stats["loads"], len(attempts)) == (1, 1, 2)


def test_meta_tensors_are_named():
    from chatgpt_tool_hub.runtime.models.manager import meta_tensors

    assert meta_tensors(PipelineLike(linear())) == []
    assert meta_tensors(PipelineLike(meta_linear())) == ["Linear.weight", "Linear.bias"]
    assert meta_tensors(object()) == [] and meta_tensors(None) == []


def test_model_bytes_counts_tuples_and_pipeline_attributes_once():
    shared = linear()
    assert model_bytes((shared, {"again": shared})) == LINEAR_BYTES
    assert model_bytes(PipelineLike(shared, vocoder=linear())) == 2 * LINEAR_BYTES

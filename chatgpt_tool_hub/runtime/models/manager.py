"""``ModelManager``: one load per model per process, kept warm, LRU-evicted under a budget.

Every app has its own manager (``manager_for(settings)``, built by the app
factory into the app's context): its budget and its warm models belong to that
app, and two apps never change each other's. Tools built alone (pure mode)
share a process-wide manager per budget (``shared_manager(budget)``; the
unlimited one is ``default_manager()``): the tools built with
``expert_memory_budget_mb=512`` stay within 512 MB together, and a tool built
with another budget gets another manager. A shared manager's budget is fixed
(assigning another raises ``ConfigError``), so no tool or app can change the
budget others rely on. ``manager_of(models, settings)`` picks a tool's
manager: its app's, else the shared one for its settings. Tests and embedders
can make their own ``ModelManager()``.

``get(key, loader, device=...)`` returns the cached model for ``key`` or calls
``loader()`` exactly once, also when many threads ask at the same moment (a
lock per key and a double-checked dict). When ``memory_budget_mb`` > 0 and
the resident models would exceed it, the least recently used ones are evicted:
the manager drops its reference, runs ``gc.collect()`` and empties the CUDA
cache, so the memory really returns once no call is still using the model
(``reclaim()`` runs the same clean-up when such a call ends: see ``ExpertTool``).

Loads are serialised per process: one process-wide lock (``load_lock()``),
shared by every manager, so two loads never run at the same moment, in any
app. transformers and diffusers change process-wide state while they build a
model (the default dtype, patched ``tie_weights`` and init functions, weights
created on the ``meta`` device and filled in afterwards); two loads at once
undo each other's patches and leave weights on ``meta``. The per-key lock
comes first, so threads that ask for the same cold model wait on that model
(one load) and not on the others. A loaded model is checked before it is
cached: one that still holds tensors on the ``meta`` device raises a
``ToolExecutionError`` and is not kept (``meta_tensors``); a loader that
raised caches nothing; the next call tries again.

Under a budget, room is made *before* a load, for the size the model had when
it was last loaded or, the first time, for ``expected_mb`` (the expert tools
pass the size of the checkpoint files); as loads run one at a time, two
cold models never sit in memory together when only one fits.

``call_lock(key)`` is one lock per key for the life of the manager: calls on a
model are serialised also when it was evicted (or reloaded) while they ran.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping

from ...config import coerce_as, get_typed
from ...errors import ConfigError, ToolExecutionError
from ...loadlock import CALL_GATE, PROCESS_LOAD_LOCK, ProcessLoadLock

__all__ = ["ModelManager", "default_manager", "shared_manager", "manager_of", "model_bytes", "manager_for",
           "configured_budget", "load_lock", "torch_modules", "meta_tensors", "meta_error"]

log = logging.getLogger("chatgpt_tool_hub.experts")
_MB = 1024 * 1024


_LOAD_LOCK = PROCESS_LOAD_LOCK


def load_lock() -> ProcessLoadLock:
    """The process-wide lock every manager's loads run under (``with load_lock(): ...``).

    For code outside a manager that builds a transformers/diffusers model in a
    thread (an embedding model, a local LLM): under this lock its load never
    overlaps an expert tool's.
    """
    return _LOAD_LOCK


@dataclass
class _Entry:
    value: Any
    size_bytes: int
    device: str | None


class ModelManager:
    """Loads models lazily, keeps them warm and evicts the least recently used.

    ``memory_budget_mb``: 0 (the default) means unlimited. A single model
    larger than the budget is still loaded (and everything else evicted).
    ``shared``: the manager is a process-wide one (``shared_manager``), whose
    budget cannot be changed after it is made.
    """

    def __init__(self, memory_budget_mb: float = 0, *, shared: bool = False):
        self._lock = threading.Lock()
        self._models: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._call_locks: dict[Hashable, threading.Lock] = {}  # per key, kept after eviction
        self._known_sizes: dict[Hashable, int] = {}  # sizes of models seen before, to evict ahead of a reload
        self.shared = False
        self._budget_mb = 0.0
        self.memory_budget_mb = float(memory_budget_mb or 0)
        self.shared = bool(shared)
        self._loads = self._hits = self._evictions = self._failures = 0
        self._load_seconds = self._wait_seconds = 0.0

    @property
    def memory_budget_mb(self) -> float:
        """MB the resident models may take (0: no limit)."""
        return self._budget_mb

    @memory_budget_mb.setter
    def memory_budget_mb(self, value: float) -> None:
        budget = float(value or 0)
        if self.shared and budget != self._budget_mb:
            raise ConfigError(f"this model manager is shared by every tool built alone with expert_memory_budget_mb="
                              f"{self._budget_mb:g}, so its budget stays; build the tool with the budget it needs "
                              f"(expert_memory_budget_mb={budget:g}) or give it a ModelManager of its own",
                              key="expert_memory_budget_mb")
        self._budget_mb = budget

    # ---- the main call -------------------------------------------------------------

    def get(self, key: Hashable, loader: Callable[[], Any], *, device: str | None = None,
            size_mb: float | None = None, expected_mb: float | None = None) -> Any:
        """The model for ``key``, loading it with ``loader()`` on first use.

        ``size_mb`` overrides the measured size (parameters + buffers bytes).
        ``expected_mb`` is an estimate of the size before a first load, used to
        make room under the budget ahead of it. The load runs under the
        process-wide ``load_lock()``. A loader that raises, or returns a model
        with tensors on the ``meta`` device (a ``ToolExecutionError``), caches
        nothing; the next call tries again.
        """
        with self._lock:
            entry = self._touch(key)
            if entry is not None:
                return entry.value
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # a load inside a load (this thread holds the process lock) skips the key lock: the thread that may
        # hold it waits for the process lock, and finds the model cached once it gets it. A load asked for
        # inside a model call gives up the call's share of CALL_GATE while it waits and loads.
        with CALL_GATE.suspended(), contextlib.nullcontext() if _LOAD_LOCK.held() else key_lock:
            with self._lock:
                entry = self._touch(key)
                if entry is not None:
                    return entry.value
            waited = time.perf_counter()
            with _LOAD_LOCK.hold(_describe(key)):
                with self._lock:
                    self._wait_seconds += time.perf_counter() - waited
                    entry = self._touch(key)  # loaded meanwhile by a load inside another load
                    if entry is not None:
                        return entry.value
                    incoming = self._known_sizes.get(key) or int((expected_mb or 0) * _MB)
                    evicted = self._make_room(key, incoming)
                self._release(evicted)
                value = self._load(key, loader, device)
                size = int(size_mb * _MB) if size_mb is not None else model_bytes(value)
                with self._lock:
                    self._models[key] = _Entry(value, size, device)
                    self._known_sizes[key] = size
                    evicted = self._make_room(key, 0)
                self._release(evicted)
            return value

    def call_lock(self, key: Hashable) -> threading.Lock:
        """The lock that serialises calls on ``key``'s model (pipelines are not thread-safe).

        One lock per key for the life of the manager, so calls that still hold an
        evicted (or since reloaded) model are serialised with the others too.
        """
        with self._lock:
            return self._call_locks.setdefault(key, threading.Lock())

    def holds(self, key: Hashable, value: Any) -> bool:
        """Whether ``value`` is the resident model of ``key`` (False once it was evicted or replaced)."""
        with self._lock:
            entry = self._models.get(key)
            return entry is not None and entry.value is value

    def reclaim(self, device: str | None = None) -> None:
        """Return freed memory now: ``gc.collect()`` and, on CUDA, empty the cache.

        For a call that held a model evicted while it ran: once it drops its
        reference, this returns the memory the eviction could not.
        """
        gc.collect()
        torch = sys.modules.get("torch")  # only when something already imported it
        cuda = str(device or "").startswith("cuda")
        if torch is not None and (cuda or torch.cuda.is_initialized()):
            torch.cuda.empty_cache()

    def is_loaded(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._models

    def evict(self, key: Hashable) -> bool:
        """Drop one model; True when it was loaded."""
        with self._lock:
            entry = self._models.pop(key, None)
        if entry is None:
            return False
        self._release([(key, entry)])
        return True

    def clear(self) -> None:
        """Drop every model and return the memory."""
        with self._lock:
            evicted = list(self._models.items())
            self._models.clear()
        self._release(evicted)

    def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks."""
        with self._lock:
            resident = sum(e.size_bytes for e in self._models.values())
            return {
                "loads": self._loads,
                "hits": self._hits,
                "evictions": self._evictions,
                "failures": self._failures,
                "resident": len(self._models),
                "resident_mb": round(resident / _MB, 3),
                "budget_mb": self.memory_budget_mb,
                "load_seconds": round(self._load_seconds, 3),
                "load_wait_seconds": round(self._wait_seconds, 3),  # waiting for other loads (the process lock)
                "models": [_describe(k) for k in self._models],
            }

    def __repr__(self) -> str:
        s = self.stats()
        return f"ModelManager(resident={s['resident']}, {s['resident_mb']} MB, budget={s['budget_mb']} MB)"

    # ---- internals -----------------------------------------------------------------

    def _touch(self, key: Hashable) -> _Entry | None:
        """The entry marked most recently used, counting a hit (caller holds the lock)."""
        entry = self._models.get(key)
        if entry is not None:
            self._models.move_to_end(key)
            self._hits += 1
        return entry

    def _load(self, key: Hashable, loader: Callable[[], Any], device: str | None) -> Any:
        label = _describe(key)
        log.info("loading %s%s", label, f" on {device}" if device else "")
        started = time.perf_counter()
        try:
            value = loader()
            error = meta_error(value, label)
            if error:
                del value
                raise ToolExecutionError(error)
        except BaseException:
            with self._lock:
                self._failures += 1
            if str(device or "").startswith("cuda"):
                self.reclaim(device)  # what a half-done load left in the CUDA cache (an out-of-memory, say)
            raise
        elapsed = time.perf_counter() - started
        with self._lock:
            self._loads += 1
            self._load_seconds += elapsed
        log.info("loaded %s in %.1fs", label, elapsed)
        return value

    def _make_room(self, key: Hashable, incoming: int) -> list[tuple[Hashable, _Entry]]:
        """Pop LRU entries (not ``key``) until the budget fits (caller holds the lock)."""
        if self.memory_budget_mb <= 0:
            return []
        budget = self.memory_budget_mb * _MB
        evicted = []
        for other in list(self._models):
            if sum(e.size_bytes for e in self._models.values()) + incoming <= budget:
                break
            if other == key:
                continue
            evicted.append((other, self._models.pop(other)))
        return evicted

    def _release(self, evicted: list[tuple[Hashable, _Entry]]) -> None:
        if not evicted:
            return
        with self._lock:
            self._evictions += len(evicted)
        cuda = False
        for key, entry in evicted:
            log.info("evicting %s (%.1f MB) to stay within expert_memory_budget_mb=%s",
                     _describe(key), entry.size_bytes / _MB, self.memory_budget_mb)
            cuda = cuda or str(entry.device or "").startswith("cuda")
            entry.value = None
        self.reclaim("cuda" if cuda else None)


def _is_module(obj: Any) -> bool:
    return callable(getattr(obj, "parameters", None)) and callable(getattr(obj, "buffers", None))


def torch_modules(obj: Any) -> list[Any]:
    """The torch modules a loaded model is made of, each once.

    ``obj`` itself when it is a module; the items of a tuple/list/dict of them
    (a model with its processor); a pipeline's ``.model`` and the modules among
    its attributes (a vocoder); a diffusers pipeline's ``.components``.
    """
    found: dict[int, Any] = {}

    def visit(item: Any, depth: int) -> None:
        if item is None or depth > 3 or isinstance(item, (str, bytes, int, float)):
            return
        if _is_module(item):
            found.setdefault(id(item), item)
        elif isinstance(item, (list, tuple)):
            for part in item:
                visit(part, depth + 1)
        elif isinstance(item, dict):
            for part in item.values():
                visit(part, depth + 1)
        elif depth == 0:  # a pipeline or a holder of modules
            for name in ("model", "components"):
                try:
                    visit(getattr(item, name, None), depth + 1)
                except Exception:  # a property that fails: nothing to measure there
                    continue
            for part in getattr(item, "__dict__", {}).values():
                if _is_module(part):
                    found.setdefault(id(part), part)

    visit(obj, 0)
    return list(found.values())


def _tensors(module: Any) -> list[tuple[str, Any]]:
    try:
        return [*module.named_parameters(), *module.named_buffers()]
    except Exception:  # not a torch module after all
        try:
            return [("", t) for t in (*module.parameters(), *module.buffers())]
        except Exception:
            return []


def model_bytes(obj: Any) -> int:
    """Bytes of parameters + buffers of the torch modules in ``obj`` (a pipeline, a model...), see
    :func:`torch_modules`; shared tensors count once; 0 when nothing measurable is found (the model then
    never triggers eviction)."""
    seen: set[int] = set()
    total = 0
    for module in torch_modules(obj):
        for _, tensor in _tensors(module):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
    return total


def meta_tensors(obj: Any) -> list[str]:
    """Names of the parameters and buffers of ``obj``'s modules that are on the ``meta`` device.

    A model with any is not usable: its weights never arrived (a checkpoint
    without them, or a load disturbed by another thread's load).
    """
    names = []
    for module in torch_modules(obj):
        prefix = type(module).__name__
        for name, tensor in _tensors(module):
            if getattr(tensor, "is_meta", False):
                names.append(f"{prefix}.{name}" if name else prefix)
    return names


def meta_error(model: Any, what: str, setting: str | None = None) -> str | None:
    """Why ``model`` must not be used (tensors left on the ``meta`` device), or None when it is whole.

    ``what`` names the model (``model 'x' for image-captioning``); ``setting``
    the setting to change when the checkpoint itself lacks the weights.
    """
    names = meta_tensors(model)
    if not names:
        return None
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    fix = (f"set {setting} to a complete folder made by save_pretrained" if setting
           else "check that the checkpoint holds every weight")
    return (f"could not load {what}: {len(names)} weight(s) stayed on the meta device ({shown}), so the model "
            f"was not kept; the next call loads it again, and if that fails too, {fix}")


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and key:
        return " ".join(str(part) for part in key if part)
    return str(key)


def configured_budget(settings: Mapping[str, Any]) -> float | None:
    """``expert_memory_budget_mb`` as MB (0: no limit), or None when it is not set."""
    budget = get_typed(settings, "expert_memory_budget_mb", None)
    if budget is None:
        return None
    budget = coerce_as("expert_memory_budget_mb", budget, float)
    if budget < 0:
        raise ConfigError("setting 'expert_memory_budget_mb' must be >= 0 (0 = unlimited)",
                          key="expert_memory_budget_mb")
    return budget


def manager_for(settings: Mapping[str, Any]) -> "ModelManager":
    """A new manager for one app, with the app's ``expert_memory_budget_mb``."""
    return ModelManager(configured_budget(settings) or 0)


_shared: dict[float, ModelManager] = {}
_shared_lock = threading.Lock()


def shared_manager(budget_mb: float = 0) -> ModelManager:
    """The process-wide manager of the tools built alone with ``expert_memory_budget_mb=budget_mb``.

    One per budget, made on first use; its budget is fixed (``ModelManager(shared=True)``),
    so a tool built with another budget never changes it. 0 (no limit) is :func:`default_manager`.
    """
    budget = float(budget_mb or 0)
    if budget < 0:
        raise ConfigError("setting 'expert_memory_budget_mb' must be >= 0 (0 = unlimited)",
                          key="expert_memory_budget_mb")
    with _shared_lock:
        manager = _shared.get(budget)
        if manager is None:
            manager = _shared[budget] = ModelManager(budget, shared=True)
        return manager


def default_manager() -> ModelManager:
    """The process-wide manager, without a budget, of the tools built alone without one (created on first use)."""
    return shared_manager(0)


def manager_of(models: "ModelManager | None", settings: Mapping[str, Any]) -> "ModelManager":
    """A tool's manager: its app's (``models``), or, for a tool built alone, the shared one for its settings'
    ``expert_memory_budget_mb`` (:func:`shared_manager`)."""
    if models is not None:
        return models
    return shared_manager(configured_budget(settings) or 0)

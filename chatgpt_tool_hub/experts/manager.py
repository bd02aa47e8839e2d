"""``ModelManager``: one load per model per process, kept warm, LRU-evicted under a budget.

Every app has its own manager (``manager_for(settings)``, built by the app
factory into the app's context): its budget and its warm models belong to that
app, and two apps never change each other's. ``default_manager()`` is the
process-wide instance that tools built alone (pure mode) share; tests and
embedders can make their own ``ModelManager()``.

``get(key, loader, device=...)`` returns the cached model for ``key`` or calls
``loader()`` exactly once, also when many threads ask at the same moment (a
lock per key and a double-checked dict). When ``memory_budget_mb`` > 0 and
the resident models would exceed it, the least recently used ones are evicted:
the manager drops its reference, runs ``gc.collect()`` and empties the CUDA
cache, so the memory really returns once no call is still using the model
(``reclaim()`` runs the same clean-up when such a call ends: see ``ExpertTool``).

Under a budget, room is made *before* a load, for the size the model had when
it was last loaded or, the first time, for ``expected_mb`` (the expert tools
pass the size of the checkpoint files), and loads run one at a time, so two
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

from ..config import coerce_as, get_typed
from ..errors import ConfigError

__all__ = ["ModelManager", "default_manager", "model_bytes", "manager_for", "configured_budget"]

log = logging.getLogger("chatgpt_tool_hub.experts")
_MB = 1024 * 1024


@dataclass
class _Entry:
    value: Any
    size_bytes: int
    device: str | None


class ModelManager:
    """Loads models lazily, keeps them warm and evicts the least recently used.

    ``memory_budget_mb``: 0 (the default) means unlimited. A single model
    larger than the budget is still loaded (and everything else evicted).
    """

    def __init__(self, memory_budget_mb: float = 0):
        self._lock = threading.Lock()
        self._models: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._call_locks: dict[Hashable, threading.Lock] = {}  # per key, kept after eviction
        self._load_gate = threading.Lock()  # under a budget, one load at a time
        self._known_sizes: dict[Hashable, int] = {}  # sizes of models seen before, to evict ahead of a reload
        self.memory_budget_mb = float(memory_budget_mb or 0)
        self._loads = self._hits = self._evictions = self._failures = 0
        self._load_seconds = 0.0

    # ---- the main call -------------------------------------------------------------

    def get(self, key: Hashable, loader: Callable[[], Any], *, device: str | None = None,
            size_mb: float | None = None, expected_mb: float | None = None) -> Any:
        """The model for ``key``, loading it with ``loader()`` on first use.

        ``size_mb`` overrides the measured size (parameters + buffers bytes).
        ``expected_mb`` is an estimate of the size before a first load, used to
        make room under the budget ahead of it. A loader that raises caches
        nothing; the next call tries again.
        """
        with self._lock:
            entry = self._touch(key)
            if entry is not None:
                return entry.value
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                entry = self._touch(key)
                if entry is not None:
                    return entry.value
            gate = self._load_gate if self.memory_budget_mb > 0 else contextlib.nullcontext()
            with gate:
                with self._lock:
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


def model_bytes(obj: Any) -> int:
    """Bytes of parameters + buffers of the torch modules in ``obj`` (a pipeline, a model...).

    Looks at ``obj`` itself, ``obj.model`` and diffusers-style ``obj.components``;
    0 when nothing measurable is found (the model then never triggers eviction).
    """
    modules = []
    for candidate in (obj, getattr(obj, "model", None)):
        if hasattr(candidate, "parameters") and hasattr(candidate, "buffers"):
            modules.append(candidate)
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        modules.extend(c for c in components.values() if hasattr(c, "parameters") and hasattr(c, "buffers"))
    seen: set[int] = set()
    total = 0
    for module in modules:
        try:
            tensors = [*module.parameters(), *module.buffers()]
        except Exception:  # not a torch module after all
            continue
        for tensor in tensors:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
    return total


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


_default: ModelManager | None = None
_default_lock = threading.Lock()


def default_manager() -> ModelManager:
    """The process-wide manager shared by expert tools (created on first use)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = ModelManager()
    return _default

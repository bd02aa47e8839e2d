"""The child side of :func:`chatgpt_tool_hub.runtime.contained.run_contained` (run as a script).

``python -I contained_child.py ROOTS MODULE FUNCTION`` puts ``ROOTS`` (the
folder that holds the ``chatgpt_tool_hub`` package, and any more the caller
names, joined by ``os.pathsep``) first on ``sys.path``,
reads one pickled payload from stdin, calls ``MODULE.FUNCTION(payload)`` and
writes one pickled reply to its stdout, then exits:

* ``("ok", result)``;
* ``("error", exception, type name, message)``: the function raised; the
  exception itself travels only when it is one of the package's own errors
  (``chatgpt_tool_hub.errors``), which the parent takes back, else ``None``;
* ``("memory", "", type name, message)``: it ran out of memory (``MemoryError``
  under the address-space limit).

Anything the function prints goes to stderr, so that stdout carries the reply
alone. The packages between the root package and ``MODULE`` are made bare
(their ``__init__`` is not run): a parser loads only the modules it imports,
not the package's registries, which keeps the start of the child short.

Standard library only, nothing of the package imported at the start.
"""

import importlib
import importlib.util
import os
import pickle
import sys
import types

_ROOT_PACKAGE = "chatgpt_tool_hub"


def _bare_parents(module: str) -> None:
    """Register ``a.b`` and ``a.b.c`` of ``a.b.c.d`` as packages without running their ``__init__``."""
    parts = module.split(".")
    if parts[0] != _ROOT_PACKAGE:
        return
    importlib.import_module(parts[0])  # the root's __init__ is light (its names load on first use)
    for end in range(2, len(parts)):
        name = ".".join(parts[:end])
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            return
        package = types.ModuleType(name)
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__package__ = name
        package.__file__ = spec.origin
        sys.modules[name] = package
        setattr(sys.modules[".".join(parts[:end - 1])], parts[end - 1], package)


def _reply(exc: BaseException, kind: str = "error") -> tuple:
    own = type(exc).__module__ == _ROOT_PACKAGE + ".errors"
    return (kind, exc if own else None, type(exc).__name__, str(exc)[:2000])


def main() -> None:
    root, module, function = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path[:0] = [folder for folder in root.split(os.pathsep) if folder]
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the parser prints goes to stderr
    try:
        _bare_parents(module)
        payload = pickle.loads(sys.stdin.buffer.read())
        target = getattr(importlib.import_module(module), function)
        reply: tuple = ("ok", target(payload))
    except MemoryError as exc:
        reply = _reply(exc, "memory")
    except BaseException as exc:  # everything goes back to the parent, which decides
        reply = _reply(exc)
    try:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError as exc:
        data = pickle.dumps(_reply(exc, "memory"))
    except Exception as exc:  # a result that cannot be pickled
        data = pickle.dumps(("error", None, type(exc).__name__, f"the result could not be sent back: {exc}"[:2000]))
    out.write(data)
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

"""Cold loads under concurrency: fresh processes, 8 threads calling cold expert tools at the same moment.

Each process is a new Python interpreter (``sys.executable``) that has not
imported torch or transformers. Its main thread builds the tools (which
imports nothing heavy), then 8 threads pass a barrier and call cold tools on
tiny random models at once: several different tools (image-classification,
text-classification, image-captioning, depth-estimation, image-segmentation,
object-detection), two of them asked for twice, split over two model managers
(two apps in one process). So the tool threads are the first to import
transformers, loads of different models overlap, and two threads ask for the
same cold model. After the concurrent round, every tool is called once more:
a model that broke during a concurrent load must not stay cached.

A process fails when any call raises; the figures are the share of failed
processes, failed calls, and calls that still failed on the second round.

    python benchmarks/cold_loads.py                    # 20 processes
    python benchmarks/cold_loads.py --processes 5 --threads 8
    python benchmarks/cold_loads.py --device cuda      # float16 loads on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (tool, manager index): 8 calls, 6 different tools; image-classification twice on one manager
# (one load for both), text-classification once per manager (one load per app)
CALLS = [("image-classification", 0), ("text-classification", 0), ("image-captioning", 0),
         ("object-detection", 0), ("image-classification", 0),
         ("depth-estimation", 1), ("image-segmentation", 1), ("text-classification", 1)]
TOOLS = sorted({name for name, _ in CALLS})
OPTIONS = {"image-captioning": {"max_new_tokens": 8}, "object-detection": {"threshold": 0.0}}


def build_models(folder: Path) -> dict[str, str]:
    """Tiny models of the tools in ``CALLS``, saved under ``folder`` (imports torch and transformers)."""
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    return {name: BUILDERS[name](folder / name) for name in TOOLS}


def make_workspace(folder: Path) -> tuple[str, str]:
    """A workspace with one test picture; ``(workspace, image path relative to it)``."""
    from PIL import Image, ImageDraw

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    workspace = folder / "workspace"
    picture = Image.new("RGB", (96, 64), (30, 120, 200))
    ImageDraw.Draw(picture).ellipse([20, 10, 70, 55], fill=(240, 200, 20))
    return str(workspace), ingest_image(picture, workspace)


def make_tool(name: str, spec: dict, manager):
    """The expert tool ``name`` on its tiny model, on ``spec["device"]`` (default cpu), with ``manager``."""
    from importlib import import_module

    from chatgpt_tool_hub.experts import EXPERT_TOOLS

    module, cls = EXPERT_TOOLS[name]
    return getattr(import_module(module), cls)(model=spec["models"][name], device=spec.get("device", "cpu"),
                                               manager=manager,
                                               workspace_dir=spec["workspace"], options=OPTIONS.get(name))


def arguments(name: str, spec: dict) -> dict:
    """What one call of ``name`` gets."""
    return {"text": "I loved this film"} if name == "text-classification" else {"image": spec["image"]}


def child(spec: dict) -> dict:
    """One fresh process: ``threads`` threads call cold tools at once, then each tool once more."""
    from chatgpt_tool_hub.runtime.models.manager import ModelManager

    if spec.get("preimport"):  # the main thread imports transformers fully first: only the load race is left
        import transformers

        transformers.pipeline, transformers.AutoModel  # noqa: B018 - resolve the lazy attributes
    managers = [ModelManager(), ModelManager()]
    calls = [CALLS[i % len(CALLS)] for i in range(spec["threads"])]
    tools = [make_tool(name, spec, managers[which]) for name, which in calls]
    heavy_before = sorted(m for m in ("torch", "transformers", "PIL") if m in sys.modules)

    barrier = threading.Barrier(len(tools))
    errors: list[str | None] = [None] * len(tools)

    def call(index: int) -> None:
        name = calls[index][0]
        try:
            barrier.wait()
            tools[index].run(arguments(name, spec))
        except BaseException as exc:  # counted, never fatal
            errors[index] = f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(tools))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    concurrent_s = time.perf_counter() - started
    retry: list[str] = []
    for index, (name, _) in enumerate(calls):  # a model that broke in the race must not stay cached
        try:
            tools[index].run(arguments(name, spec))
        except BaseException as exc:
            retry.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
    return {"heavy_before": heavy_before, "errors": [e for e in errors if e], "retry_errors": retry,
            "loads": [m.stats()["loads"] for m in managers], "concurrent_s": round(concurrent_s, 3)}


def run_process(spec: dict, timeout: float = 600) -> dict:
    """Run :func:`child` in a fresh interpreter; its JSON report (or what went wrong)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"heavy_before": [], "errors": [f"process exited with {proc.returncode}: {' | '.join(tail)}"],
            "retry_errors": [], "loads": [], "concurrent_s": 0.0}


def prepare(folder: Path, threads: int = 8) -> dict:
    """Build the tiny models and the workspace once; the spec every child gets."""
    workspace, image = make_workspace(folder)
    return {"models": build_models(folder / "models"), "workspace": workspace, "image": image, "threads": threads}


KINDS = (("has no attribute", "half-imported transformers (module has no attribute ...)"),
         ("meta", "meta tensors (a load disturbed by another thread's load)"),
         ("process exited", "the process died"))


def kind_of(error: str) -> str:
    """The cause of a failed call, in a few words (the first of ``KINDS`` its message matches)."""
    return next((label for needle, label in KINDS if needle in error), error.split(": ", 1)[-1][:100])


def summarise(reports: list[dict]) -> dict:
    failed = [r for r in reports if r["errors"] or r["retry_errors"]]
    messages: dict[str, int] = {}
    for report in reports:
        for error in report["errors"] + report["retry_errors"]:
            messages[kind_of(error)] = messages.get(kind_of(error), 0) + 1
    return {"processes": len(reports), "failed_processes": len(failed),
            "failed_calls": sum(len(r["errors"]) for r in reports),
            "failed_retries": sum(len(r["retry_errors"]) for r in reports),
            "calls": sum(len(CALLS) if r["loads"] else 0 for r in reports), "messages": messages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--preimport", action="store_true",
                        help="import transformers in the main thread first (leaves only the load race)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (float16 on CUDA)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        try:
            report = child(json.loads(args.child))
        except BaseException:
            report = {"heavy_before": [], "errors": [traceback.format_exc().strip().splitlines()[-1]],
                      "retry_errors": [], "loads": [], "concurrent_s": 0.0}
        print(json.dumps(report))
        return 0
    with tempfile.TemporaryDirectory(prefix="cold-loads-") as tmp:
        spec = {**prepare(Path(tmp), args.threads), "preimport": args.preimport, "device": args.device}
        reports = []
        for number in range(args.processes):
            report = run_process(spec)
            reports.append(report)
            state = "ok" if not (report["errors"] or report["retry_errors"]) else "FAILED"
            print(f"process {number + 1:>2}: {state:<6} loads per manager {report['loads']} "
                  f"concurrent round {report['concurrent_s']:.2f}s "
                  f"{'; '.join(report['errors'] + report['retry_errors'])[:200]}", flush=True)
    summary = summarise(reports)
    print(f"\n{summary['failed_processes']}/{summary['processes']} processes with failures, "
          f"{summary['failed_calls']} failed concurrent calls, {summary['failed_retries']} failed second calls "
          f"({args.threads} threads, {len(TOOLS)} tools, 2 managers, {args.device}"
          f"{', transformers imported first' if args.preimport else ''})")
    for message, count in sorted(summary["messages"].items(), key=lambda kv: -kv[1]):
        print(f"  {count:>3} x {message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

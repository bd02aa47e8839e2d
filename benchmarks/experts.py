"""Expert tools: cold load vs warm call latency, and 8 concurrent vs 8 sequential calls.

By default every tool runs on a tiny random model built in a temp folder (the
same builders the tests use), so this runs on any CPU box in seconds and
measures the tool/manager overhead. Point it at real models to measure them:

    python benchmarks/experts.py                                   # tiny models, default device
    python benchmarks/experts.py --device cpu --calls 8
    python benchmarks/experts.py --real                            # the tools' default hub ids
    python benchmarks/experts.py --model-dir ~/models              # ~/models/<tool-name>/ folders
    python benchmarks/experts.py --model object-detection=hustvl/yolos-tiny --tools object-detection
    python benchmarks/experts.py --tools speech-recognition text-to-speech --calls 4

Each tool gets the sample input the tests use (``experts.tiny.samples``: a
small picture, one second of 16 kHz audio, a short GIF, a sentence, and the
extra arguments a tool takes); tiny models also get the settings that keep
them quick (one denoising step, tiny pictures). The diffusion tools are
skipped when diffusers is not installed. ``--real --present-only`` measures
only the tools whose default model is already on the machine (a GPU box with
a warm cache).

Columns: ``import`` is torch+transformers import time (paid once per process);
``cold`` the first call (load + inference); ``load`` the manager's load time;
``warm`` the median warm call; ``seq``/``conc`` the wall time of N sequential
and N concurrent (threaded) calls, and their throughput in calls/s; ``peak MB``
the peak CUDA memory allocated (GPU only).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatgpt_tool_hub.experts import EXPERT_TOOLS  # noqa: E402,F401  (the --tools choices)


def cached(model: str) -> bool:
    """Whether a hub id (or folder) is on this machine: a folder, or a snapshot in the Hugging Face cache."""
    from chatgpt_tool_hub.runtime.models.loading import _cached_snapshot

    return Path(model).expanduser().is_dir() or _cached_snapshot(model, None) is not None


def pick_models(args, scratch: Path) -> dict[str, str]:
    from chatgpt_tool_hub.experts.tiny import BUILDERS
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    explicit = dict(item.split("=", 1) for item in args.model)
    models = {}
    for name in args.tools:
        if name in explicit:
            models[name] = explicit[name]
        elif args.model_dir and (Path(args.model_dir).expanduser() / name).is_dir():
            models[name] = str(Path(args.model_dir).expanduser() / name)
        elif args.real:
            default = main_tool_register.build(name).default_model
            if default.startswith("builtin:") or not args.present_only or cached(default):
                models[name] = default
            else:
                print(f"skipping {name}: its default model {default} is not on this machine", file=sys.stderr)
        else:
            models[name] = BUILDERS[name](scratch / name)
    return models


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bench_tool(name: str, model: str, workspace: str, device: str | None, calls: int, tiny: bool) -> dict:
    from dataclasses import replace

    from chatgpt_tool_hub.experts.tiny.samples import fast_settings, sample_input
    from chatgpt_tool_hub.runtime.models.manager import ModelManager
    from chatgpt_tool_hub.tools.context import pure_context
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    key = name.replace("-", "_")
    settings = {f"{key}_model": model, "workspace_dir": workspace, **(fast_settings(name) if tiny else {})}
    if device:
        settings["expert_device"] = device
    manager = ModelManager()
    context = replace(pure_context(settings), models=manager)
    tool = main_tool_register.build(name, context=context)
    inputs = sample_input(name, workspace)
    cold = timed(lambda: tool.run(inputs))
    warm = statistics.median(timed(lambda: tool.run(inputs)) for _ in range(5))
    seq = timed(lambda: [tool.run(inputs) for _ in range(calls)])
    barrier = threading.Barrier(calls)

    def worker():
        barrier.wait()
        tool.run(inputs)

    threads = [threading.Thread(target=worker) for _ in range(calls)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conc = time.perf_counter() - started
    stats = manager.stats()
    peak = None
    torch = sys.modules.get("torch")
    if torch is not None and str(tool.device).startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**20
    return {"tool": name, "device": tool.device, "dtype": tool.dtype, "mb": stats["resident_mb"],
            "cold": cold, "load": stats["load_seconds"], "warm": warm, "seq": seq, "conc": conc,
            "loads": stats["loads"], "peak": peak}


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", nargs="+", default=list(EXPERT_TOOLS), choices=list(EXPERT_TOOLS))
    parser.add_argument("--model", action="append", default=[], metavar="TOOL=ID_OR_PATH")
    parser.add_argument("--model-dir", help="a folder with one sub-folder per tool name")
    parser.add_argument("--real", action="store_true", help="use each tool's default hub id")
    parser.add_argument("--present-only", action="store_true",
                        help="with --real: only the tools whose default model is already on this machine")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads (0: torch's default); 1 avoids OpenMP spin on busy small boxes")
    args = parser.parse_args(argv)

    import_s = timed(lambda: (__import__("torch"), __import__("transformers")))
    import torch

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    if importlib.util.find_spec("diffusers") is None:
        from chatgpt_tool_hub.experts.tables.diffusion import TOOLS as DIFFUSION

        skipped = [t for t in args.tools if t in DIFFUSION]
        if skipped:
            print(f"skipping {', '.join(skipped)}: diffusers is not installed", file=sys.stderr)
        args.tools = [t for t in args.tools if t not in DIFFUSION]

    with tempfile.TemporaryDirectory(prefix="experts-bench-") as tmp:
        scratch = Path(tmp)
        workspace = str(scratch / "workspace")
        models = pick_models(args, scratch)
        tiny = not (args.real or args.model or args.model_dir)
        rows = []
        for name, model in models.items():
            try:
                rows.append(bench_tool(name, model, workspace, args.device, args.calls, tiny))
            except Exception as exc:  # one tool that cannot run (a model missing) does not end the benchmark
                print(f"{name}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)

    n = args.calls
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs ({torch.get_num_threads()} torch threads), "
          f"cuda={torch.cuda.is_available()}, "
          f"import torch+transformers {import_s:.2f}s, {n} calls per batch")
    header = (f"{'tool':<29}{'device':<8}{'dtype':<9}{'MB':>9}{'cold s':>9}{'load s':>9}{'warm ms':>9}"
              f"{'seq s':>8}{'conc s':>8}{'seq/s':>8}{'conc/s':>8}{'loads':>6}{'peak MB':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        peak = f"{r['peak']:>9.0f}" if r["peak"] is not None else f"{'-':>9}"
        print(f"{r['tool']:<29}{r['device']:<8}{r['dtype']:<9}{r['mb']:>9.2f}{r['cold']:>9.3f}{r['load']:>9.3f}"
              f"{r['warm'] * 1000:>9.1f}{r['seq']:>8.3f}{r['conc']:>8.3f}{n / r['seq']:>8.1f}{n / r['conc']:>8.1f}"
              f"{r['loads']:>6}{peak}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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

Each tool gets the input it takes: a 640x480 picture (image tools, plus a
question for visual-question-answering), a 3 s 16 kHz WAV (speech-recognition)
or a sentence (text tools). text-to-image draws 32x32 with 2 steps on tiny
models and 512x512 with the model's own step count otherwise (``--real``);
it is skipped when diffusers is not installed.

Columns: ``import`` is torch+transformers import time (paid once per process);
``cold`` the first call (load + inference); ``load`` the manager's load time;
``warm`` the median warm call; ``seq``/``conc`` the wall time of N sequential
and N concurrent (threaded) calls, and their throughput in calls/s.
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

from chatgpt_tool_hub.experts import EXPERT_TOOLS  # noqa: E402
from chatgpt_tool_hub.experts.manager import ModelManager  # noqa: E402


def tool_class(name: str):
    from importlib import import_module

    module, cls = EXPERT_TOOLS[name]
    return getattr(import_module(module), cls)


def pick_models(args, scratch: Path) -> dict[str, str]:
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    explicit = dict(item.split("=", 1) for item in args.model)
    models = {}
    for name in args.tools:
        if name in explicit:
            models[name] = explicit[name]
        elif args.model_dir and (Path(args.model_dir).expanduser() / name).is_dir():
            models[name] = str(Path(args.model_dir).expanduser() / name)
        elif args.real:
            models[name] = tool_class(name).default_model
        elif name in BUILDERS:
            models[name] = BUILDERS[name](scratch / name)
        else:
            print(f"skipping {name}: no tiny builder; pass --model {name}=<id or path>", file=sys.stderr)
    return models


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


SENTENCE = "I really loved this movie, the acting was great"


def tool_inputs(name: str, image: str, audio: str) -> object:
    """What one call of ``name`` gets."""
    kinds = tool_class(name)(model="x", device="cpu", manager=ModelManager()).input_kinds()
    if name == "visual-question-answering":
        return {"image": image, "question": "what color is the ball?"}
    if "image" in kinds:
        return image
    if "audio" in kinds:
        return audio
    return {"text": "a yellow ball on a blue background" if name == "text-to-image" else SENTENCE}


def tool_options(name: str, tiny: bool) -> dict | None:
    if name == "object-detection":
        return {"threshold": 0.0}
    if name == "text-to-image" and tiny:
        return {"width": 32, "height": 32, "steps": 2}
    if name in ("speech-recognition", "visual-question-answering", "image-captioning") and tiny:
        return {"max_new_tokens": 16}  # a random model never stops by itself
    return None


def bench_tool(name: str, model: str, inputs: object, workspace: str, device: str | None, calls: int,
               tiny: bool) -> dict:
    manager = ModelManager()
    tool = tool_class(name)(model=model, device=device, manager=manager, workspace_dir=workspace,
                            options=tool_options(name, tiny))
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
    return {"tool": name, "device": tool.device, "dtype": tool.dtype, "mb": stats["resident_mb"],
            "cold": cold, "load": stats["load_seconds"], "warm": warm, "seq": seq, "conc": conc,
            "loads": stats["loads"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", nargs="+", default=list(EXPERT_TOOLS), choices=list(EXPERT_TOOLS))
    parser.add_argument("--model", action="append", default=[], metavar="TOOL=ID_OR_PATH")
    parser.add_argument("--model-dir", help="a folder with one sub-folder per tool name")
    parser.add_argument("--real", action="store_true", help="use each tool's default hub id")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads (0: torch's default); 1 avoids OpenMP spin on busy small boxes")
    args = parser.parse_args(argv)

    import_s = timed(lambda: (__import__("torch"), __import__("transformers")))
    import torch
    from PIL import Image, ImageDraw

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    import numpy as np

    from chatgpt_tool_hub.experts.files import ingest_audio, ingest_image

    with tempfile.TemporaryDirectory(prefix="experts-bench-") as tmp:
        scratch = Path(tmp)
        workspace = str(scratch / "workspace")
        picture = Image.new("RGB", (640, 480), (30, 120, 200))
        ImageDraw.Draw(picture).ellipse([200, 120, 440, 360], fill=(240, 200, 20))
        image = ingest_image(picture, workspace)
        seconds = np.arange(3 * 16000) / 16000
        audio = ingest_audio((0.3 * np.sin(2 * np.pi * 220 * seconds)).astype(np.float32), workspace, 16000)
        if "text-to-image" in args.tools and importlib.util.find_spec("diffusers") is None:
            print("skipping text-to-image: diffusers is not installed", file=sys.stderr)
            args.tools = [t for t in args.tools if t != "text-to-image"]
        models = pick_models(args, scratch)
        tiny = not (args.real or args.model or args.model_dir)
        rows = [bench_tool(name, model, tool_inputs(name, image, audio), workspace, args.device, args.calls, tiny)
                for name, model in models.items()]

    n = args.calls
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs ({torch.get_num_threads()} torch threads), "
          f"cuda={torch.cuda.is_available()}, "
          f"import torch+transformers {import_s:.2f}s, {n} calls per batch")
    header = (f"{'tool':<27}{'device':<8}{'dtype':<9}{'MB':>8}{'cold s':>9}{'load s':>9}{'warm ms':>9}"
              f"{'seq s':>8}{'conc s':>8}{'seq/s':>8}{'conc/s':>8}{'loads':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['tool']:<27}{r['device']:<8}{r['dtype']:<9}{r['mb']:>8.2f}{r['cold']:>9.3f}{r['load']:>9.3f}"
              f"{r['warm'] * 1000:>9.1f}{r['seq']:>8.3f}{r['conc']:>8.3f}{n / r['seq']:>8.1f}{n / r['conc']:>8.1f}"
              f"{r['loads']:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

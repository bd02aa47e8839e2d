"""Diffusion tools: parameter memory of all of them loaded at once, one shared base vs. a copy per tool.

Loads every diffusion tool (text-to-image, image-to-image, edit-image,
remove/replace-object, the eight ControlNet tools, text-to-video) at once and
prints the parameter + buffer bytes resident in two layouts, side by side:

* **shared**: one ``ModelManager`` for all tools, as an app runs them: one
  Stable Diffusion base (``diffusion_base_model``) that text-to-image,
  image-to-image and the ControlNets run on, plus each tool's own part;
* **separate**: a manager per tool, so each loads its own copy of everything
  it needs (what Visual ChatGPT did: a full pipeline per tool).

Usage::

    python benchmarks/diffusion_memory.py                  # tiny random models, built in a temp folder
    python benchmarks/diffusion_memory.py --real           # the tools' default hub ids that are in the HF cache
    python benchmarks/diffusion_memory.py --shapes         # the real architectures' sizes (no weights needed)
    python benchmarks/diffusion_memory.py --shapes --dtype float32 --share-base

``--shapes`` builds the real models' architectures (SD 1.5 UNet, VAE, CLIP
text encoder, safety checker, ControlNet, InstructPix2Pix and inpainting UNets,
CLIPSeg, the text-to-video UNet3D and OpenCLIP text encoder) on PyTorch's
``meta`` device and counts their parameters, so it needs no download.
``--share-base`` also runs edit-image, remove-object and replace-object on the
base's VAE and text encoder (``<tool>_share_base=true``). The "shared" column
is what each tool adds when loaded after the ones above it; the loaded totals
are the bytes of distinct tensors over every loaded model (a tensor two
pipelines share counts once), next to what the managers account.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import import_module
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatgpt_tool_hub.experts.tables.diffusion import TOOLS  # noqa: E402

_MB = 1024 * 1024
_WIDTH = {"float16": 2, "bfloat16": 2, "float32": 4}


def tool_class(name: str):
    module, cls, _ = TOOLS[name]
    return getattr(import_module(module), cls)


def tensors(obj) -> list:
    """The parameters and buffers of a loaded model (a pipeline, a ControlNet, the CLIPSeg wrapper)."""
    found = []
    for module in (obj, getattr(obj, "model", None), *(getattr(obj, "components", None) or {}).values()):
        if hasattr(module, "parameters") and hasattr(module, "buffers"):
            found.extend([*module.parameters(), *module.buffers()])
    return found


def distinct_bytes(objects) -> int:
    """Bytes of the distinct tensor storages among ``objects`` (shared modules count once)."""
    seen, total = set(), 0
    for obj in objects:
        for tensor in tensors(obj):
            key = (tensor.device.type, tensor.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                total += tensor.untyped_storage().nbytes()
    return total


def build_tool(name: str, settings: dict, manager, device: str, share_base: bool):
    key = name.replace("-", "_")
    options = {}
    if f"{key}_mask_model" in settings:
        options["mask_model"] = settings[f"{key}_mask_model"]
    if share_base and "share_base" in tool_class(name).options:
        options["share_base"] = True
    return tool_class(name)(model=settings.get(f"{key}_model"), base_model=settings.get("diffusion_base_model"),
                            device=device, manager=manager, options=options)


def load_all(tool) -> list:
    """Load what one tool needs (its own model, the base, the mask model); the loaded objects."""
    loaded = [tool.load()]
    if tool.shares_base:
        loaded.append(tool.load_base())
    if hasattr(tool, "load_mask_model"):
        loaded.append(tool.load_mask_model())
    return loaded


def measure(names: list[str], settings: dict, device: str, share_base: bool) -> dict:
    from chatgpt_tool_hub.runtime.models.manager import ModelManager

    shared_manager, shared_objects, rows = ModelManager(), [], []
    separate_objects, separate_accounted = [], 0.0
    for name in names:
        before = distinct_bytes(shared_objects)
        shared_objects.extend(load_all(build_tool(name, settings, shared_manager, device, share_base)))
        added = distinct_bytes(shared_objects) - before
        own_manager = ModelManager()
        objects = load_all(build_tool(name, settings, own_manager, device, share_base=False))
        separate_objects.extend(objects)
        separate_accounted += own_manager.stats()["resident_mb"]
        rows.append((name, added / _MB, distinct_bytes(objects) / _MB))
    stats = shared_manager.stats()
    return {"rows": rows, "shared": distinct_bytes(shared_objects) / _MB, "shared_accounted": stats["resident_mb"],
            "shared_loads": stats["loads"], "separate": distinct_bytes(separate_objects) / _MB,
            "separate_accounted": separate_accounted}


# ---- --shapes: the real architectures on the meta device --------------------------------------


def real_parts() -> dict[str, int]:
    """Parameter + buffer counts of the real models' parts, built on the meta device (no weights)."""
    import torch
    from diffusers import AutoencoderKL, ControlNetModel, UNet2DConditionModel, UNet3DConditionModel
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import CLIPConfig, CLIPSegConfig, CLIPSegForImageSegmentation, CLIPTextConfig, CLIPTextModel

    def count(module) -> int:
        return sum(t.numel() for t in [*module.parameters(), *module.buffers()])

    parts = {}
    with torch.device("meta"):
        unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768)  # SD 1.5's UNet: the defaults
        parts["unet"] = count(unet)
        parts["controlnet"] = count(ControlNetModel.from_unet(unet))
        parts["unet-pix2pix"] = count(UNet2DConditionModel(sample_size=64, cross_attention_dim=768, in_channels=8))
        parts["unet-inpaint"] = count(UNet2DConditionModel(sample_size=64, cross_attention_dim=768, in_channels=9))
        parts["vae"] = count(AutoencoderKL(block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                                           down_block_types=("DownEncoderBlock2D",) * 4, sample_size=512,
                                           up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4))
        parts["text-encoder"] = count(CLIPTextModel(CLIPTextConfig(
            vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
            max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768)))
        parts["safety-checker"] = count(StableDiffusionSafetyChecker(CLIPConfig(
            text_config={}, vision_config={"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                                           "num_attention_heads": 16, "patch_size": 14, "image_size": 224},
            projection_dim=768)))
        parts["clipseg"] = count(CLIPSegForImageSegmentation(CLIPSegConfig(use_complex_transposed_convolution=True)))
        parts["unet3d"] = count(UNet3DConditionModel(sample_size=32, cross_attention_dim=1024, attention_head_dim=64))
        parts["text-encoder-h"] = count(CLIPTextModel(CLIPTextConfig(
            vocab_size=49408, hidden_size=1024, intermediate_size=4096, num_hidden_layers=23, num_attention_heads=16,
            max_position_embeddings=77, hidden_act="gelu", projection_dim=1024)))
    return parts


def shape_plan(name: str, share_base: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(what the tool loads in the shared layout, in the separate one) as (model id, part) pairs."""
    base = [("base", p) for p in ("unet", "vae", "text-encoder", "safety-checker")]
    if name in ("text-to-image", "image-to-image"):
        return base, base
    if name == "edit-image":
        own = [("pix2pix", p) for p in ("unet-pix2pix", "vae", "text-encoder", "safety-checker")]
        return ([("pix2pix", "unet-pix2pix"), *base] if share_base else own), own
    if name in ("remove-object", "replace-object"):
        own = [("inpaint", p) for p in ("unet-inpaint", "vae", "text-encoder", "safety-checker")]
        mask = [("clipseg", "clipseg")]
        return ([("inpaint", "unet-inpaint"), *base] if share_base else own) + mask, own + mask
    if name == "text-to-video":
        own = [("t2v", p) for p in ("unet3d", "vae", "text-encoder-h")]
        return own, own
    return [(name, "controlnet"), *base], [(name, "controlnet"), *base]  # a ControlNet tool


def measure_shapes(names: list[str], dtype: str, share_base: bool) -> dict:
    parts, width = real_parts(), _WIDTH[dtype]
    loaded, rows = set(), []
    for name in names:
        shared, separate = shape_plan(name, share_base)
        added = sum(parts[p] for m, p in set(shared) - loaded)
        loaded |= set(shared)
        rows.append((name, added * width / _MB, sum(parts[p] for _, p in separate) * width / _MB))
    total = sum(parts[p] for _, p in loaded) * width / _MB
    separate_total = sum(r[2] for r in rows)
    return {"rows": rows, "shared": total, "shared_accounted": total, "shared_loads": len({m for m, _ in loaded}),
            "separate": separate_total, "separate_accounted": separate_total, "parts": parts}


def real_settings(names: list[str]) -> tuple[dict, list[str]]:
    """The default hub ids of the tools whose models are in the local cache; the tools left out."""
    from chatgpt_tool_hub.experts.diffusion_base import DEFAULT_BASE
    from chatgpt_tool_hub.runtime.models.loading import checkpoint_mb

    settings, skipped = {"diffusion_base_model": DEFAULT_BASE}, []
    if checkpoint_mb(DEFAULT_BASE) is None:
        return settings, names
    for name in names:
        cls, key = tool_class(name), name.replace("-", "_")
        needed = [cls.default_model] + ([cls.options["mask_model"]] if "mask_model" in cls.options else [])
        if all(checkpoint_mb(m) is not None for m in needed):
            if "mask_model" in cls.options:
                settings[f"{key}_mask_model"] = cls.options["mask_model"]
        else:
            skipped.append(name)
    return settings, skipped


def report(result: dict, title: str) -> None:
    print(title)
    header = f"{'tool':<24}{'shared MB (added)':>20}{'separate MB':>14}"
    print(header)
    print("-" * len(header))
    for name, added, separate in result["rows"]:
        print(f"{name:<24}{added:>20.2f}{separate:>14.2f}")
    print("-" * len(header))
    print(f"{'all loaded at once':<24}{result['shared']:>20.2f}{result['separate']:>14.2f}")
    print(f"{'managers account':<24}{result['shared_accounted']:>20.2f}{result['separate_accounted']:>14.2f}")
    ratio = result["separate"] / result["shared"] if result["shared"] else float("nan")
    print(f"separate / shared = {ratio:.2f}x; the shared layout holds {result['shared_loads']} models")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="the default hub ids that are in the local HF cache")
    mode.add_argument("--shapes", action="store_true", help="the real architectures' sizes, no weights loaded")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, choices=sorted(_WIDTH),
                        help="--shapes: bytes per parameter (default float16); loads use the tools' dtype")
    parser.add_argument("--share-base", action="store_true",
                        help="edit-image, remove-object and replace-object on the base's VAE and text encoder")
    args = parser.parse_args(argv)

    if args.shapes:
        dtype = args.dtype or "float16"
        result = measure_shapes(args.tools, dtype, args.share_base)
        print("parameters of the real architectures (millions): "
              + ", ".join(f"{k} {v / 1e6:.1f}" for k, v in result["parts"].items()))
        report(result, f"diffusion tools at real size ({dtype}), all loaded at once")
        return 0
    with tempfile.TemporaryDirectory(prefix="diffusion-memory-") as tmp:
        if args.real:
            settings, skipped = real_settings(args.tools)
            for name in skipped:
                print(f"skipping {name}: its default models are not in the local Hugging Face cache", file=sys.stderr)
            names, label = [n for n in args.tools if n not in skipped], "default models"
            if not names:
                print("no diffusion tool has its models on this machine; try --shapes", file=sys.stderr)
                return 1
        else:
            from chatgpt_tool_hub.experts.tiny.diffusion import build_diffusion_suite

            settings, names, label = build_diffusion_suite(Path(tmp) / "models", args.tools), args.tools, "tiny models"
        result = measure(names, settings, args.device, args.share_base)
    report(result, f"diffusion tools ({label}, {args.device}), all loaded at once: parameter + buffer bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

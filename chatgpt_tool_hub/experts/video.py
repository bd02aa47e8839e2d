"""Video classification: what happens in a video clip (Kinetics-400 actions with the default VideoMAE).

Frames are read with ``runtime.video_io.read_frames`` (GIF without PyAV; MP4,
WebM, AVI, MOV, MKV with the ``video`` extra), sampled evenly over the whole clip
to the number of frames the model takes (``num_frames`` of its config, 16 for
VideoMAE; a shorter clip repeats frames), and run through the model class with
its image processor (:class:`VideoClassifier`), so neither torchvision nor
decord is needed.
"""

from __future__ import annotations

from typing import Any

from ..tools.base import ToolResult
from .base import ExpertTool
from .vision import _records, _scored

__all__ = ["VideoClassificationTool", "VideoClassifier", "VIDEO_PARAMETERS"]

VIDEO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "video": {"type": "string",
                  "description": "path of a video file in the workspace (GIF, MP4 ...), from an earlier observation "
                                 "(e.g. video/1a2b3c4d.mp4)"},
    },
    "required": ["video"],
    "additionalProperties": False,
}


class VideoClassifier:
    """A video model with its processor, callable like a pipeline: ``(frames, top_k) -> [{label, score}]``."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.processor = processor
        self.device = device

    @property
    def num_frames(self) -> int:
        return int(getattr(self.model.config, "num_frames", 16) or 16)

    def __call__(self, frames: list[Any], top_k: int = 5) -> list[dict]:
        import torch

        wanted = self.num_frames
        picks = [round(i * (len(frames) - 1) / max(1, wanted - 1)) for i in range(wanted)]
        clip = [frames[i] for i in picks]
        inputs = self.processor(clip, return_tensors="pt").to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[0].float()
        scores = torch.softmax(logits, dim=-1)
        top = torch.topk(scores, k=min(max(1, top_k), scores.numel()))
        labels = self.model.config.id2label
        return [{"label": str(labels.get(int(i), i)), "score": float(s)} for s, i in zip(top.values, top.indices, strict=False)]


class VideoClassificationTool(ExpertTool):
    name = "video-classification"
    task = "video-classification"
    default_model = "MCG-NJU/videomae-base-finetuned-kinetics"
    description = (
        "video-classification: tells what is happening in a video clip (an action or activity such as 'playing "
        "guitar', 'riding a bike', 'cooking'). Use it whenever you need to know what a video file shows - never "
        "guess. "
        'Input: {"video": "<path of a video file (GIF, MP4 ...) from an earlier observation>"}. '
        "Output: the top 5 labels with scores between 0 and 1. "
        'Example: {"video": "video/1a2b3c4d.mp4"} -> "Top labels for video/1a2b3c4d.mp4 (16 frames): '
        '\\n- playing guitar: 0.874 ...".'
    )
    parameters = VIDEO_PARAMETERS
    options = {"top_k": 5}

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            processor = transformers.AutoImageProcessor.from_pretrained(location, token=token)
            model = transformers.AutoModelForVideoClassification.from_pretrained(location, dtype=args["dtype"],
                                                                                 token=token)
            return VideoClassifier(model.to(device).eval(), processor, device)

        return self.load_checkpoint(build, device, dtype)

    def call_local(self, model: Any, *, video: str) -> Any:
        from ..runtime.video_io import read_frames

        frames = read_frames(video, max_frames=model.num_frames)
        return {"labels": model(frames, top_k=int(self.options["top_k"])), "frames": len(frames)}

    def render(self, result: Any, *, video: str) -> str:
        records = result.get("labels") if isinstance(result, dict) and "labels" in result else result
        labels = _scored(_records(records))[: max(1, int(self.options["top_k"]))]
        source = self.rel(video)
        if not labels:
            return f"The classifier returned no labels for {source}."
        frames = result.get("frames") if isinstance(result, dict) else None
        read = f" ({frames} frame{'s' if frames != 1 else ''} read)" if frames else ""
        lines = [f"Top labels for {source}{read}:", *(f"- {label}: {score:.3f}" for label, score, _ in labels)]
        return ToolResult("\n".join(lines), value=labels[0][0])

"""``image-to-pose``: human body keypoints (transformers VitPose) drawn as an OpenPose skeleton on black.

VitPose is top-down: it finds the 17 COCO keypoints of a person inside a box. With
no ``image_to_pose_detector`` the whole image is one box (a picture of one person);
with one (a hub id or folder of an object-detection model, such as the
object-detection tool's ``hustvl/yolos-tiny``) the boxes labelled ``person`` are
used, and that detector is loaded through the same model manager, so it is shared
with ``object-detection`` when both run the same model.

The map is what ControlNet's openpose model was trained on: the 18 body points of
OpenPose (COCO's 17 plus the neck, halfway between the shoulders), its 17 limbs
drawn as ellipses 4 px thick in 60% of their colour, the points as dots of radius 4
in OpenPose's 18 colours, on black. Keypoints scored below ``keypoint_threshold``
(or outside the image) are left out, with the limbs that need them.
"""

from __future__ import annotations

import math
from typing import Any

from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .annotators import condition_result, local_only
from .base import ExpertTool, open_image
from .vision import IMAGE_PARAMETERS, _records, _scored

__all__ = ["ImageToPoseTool", "PoseModel", "openpose_points", "draw_openpose", "OPENPOSE_LIMBS",
           "OPENPOSE_COLORS", "COCO_TO_OPENPOSE"]

# OpenPose body-18 index -> COCO-17 index (None: the neck, the middle of the shoulders 5 and 6)
COCO_TO_OPENPOSE = (0, None, 6, 8, 10, 5, 7, 9, 12, 14, 16, 11, 13, 15, 2, 1, 4, 3)
# OpenPose's limbs (1-based, as in its code) and colours; the first 17 limbs are drawn
OPENPOSE_LIMBS = ((2, 3), (2, 6), (3, 4), (4, 5), (6, 7), (7, 8), (2, 9), (9, 10), (10, 11), (2, 12), (12, 13),
                  (13, 14), (2, 1), (1, 15), (15, 17), (1, 16), (16, 18))
OPENPOSE_COLORS = ((255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0),
                   (0, 255, 0), (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255),
                   (0, 0, 255), (85, 0, 255), (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85))
_STICK = 4


def openpose_points(keypoints: Any, scores: Any, threshold: float,
                    size: tuple[int, int]) -> list[tuple[float, float] | None]:
    """The 18 OpenPose body points of one person from COCO-17 keypoints (``None`` where not found)."""
    width, height = size
    coco: list[tuple[float, float] | None] = []
    for (x, y), score in zip(keypoints, scores, strict=False):
        x, y, score = float(x), float(y), float(score)
        found = score >= threshold and 0 <= x < width and 0 <= y < height and math.isfinite(x + y)
        coco.append((x, y) if found else None)
    coco += [None] * (17 - len(coco))
    points: list[tuple[float, float] | None] = []
    for index in COCO_TO_OPENPOSE:
        if index is not None:
            points.append(coco[index])
        elif coco[5] and coco[6]:
            points.append(((coco[5][0] + coco[6][0]) / 2, (coco[5][1] + coco[6][1]) / 2))
        else:
            points.append(None)
    return points


def draw_openpose(size: tuple[int, int], people: list[list[tuple[float, float] | None]]) -> Any:
    """The OpenPose skeletons of ``people`` (18 points each) on a black RGB image of ``size``."""
    from PIL import Image, ImageDraw

    canvas = Image.new("RGB", size, (0, 0, 0))
    draw = ImageDraw.Draw(canvas)
    for points in people:
        for (a, b), color in zip(OPENPOSE_LIMBS, OPENPOSE_COLORS, strict=False):
            start, end = points[a - 1], points[b - 1]
            if start is None or end is None:
                continue
            draw.polygon(_limb(start, end), fill=tuple(int(c * 0.6) for c in color))
    for points in people:
        for point, color in zip(points, OPENPOSE_COLORS, strict=False):
            if point is not None:
                x, y = point
                draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=color)
    return canvas


def _limb(start: tuple[float, float], end: tuple[float, float]) -> list[tuple[float, float]]:
    """The outline of the ellipse OpenPose draws for a limb: centred between the points, 4 px half-width."""
    (x0, y0), (x1, y1) = start, end
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    half = math.hypot(x1 - x0, y1 - y0) / 2
    angle = math.atan2(y1 - y0, x1 - x0)
    cos, sin = math.cos(angle), math.sin(angle)
    outline = []
    for step in range(36):
        t = 2 * math.pi * step / 36
        u, v = half * math.cos(t), _STICK * math.sin(t)
        outline.append((cx + u * cos - v * sin, cy + u * sin + v * cos))
    return outline


class PoseModel:
    """VitPose with its processor, callable: ``(image, boxes [[x, y, w, h], ...]) -> [(keypoints, scores)]``."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.processor = processor
        self.device = device

    def __call__(self, image: Any, boxes: list[list[float]]) -> list[tuple[Any, Any]]:
        import torch

        if not boxes:
            return []
        inputs = self.processor(image, boxes=[boxes], return_tensors="pt").to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        experts = getattr(getattr(self.model.config, "backbone_config", None), "num_experts", 1) or 1
        if experts > 1:  # ViTPose++: the expert head of COCO (dataset 0)
            inputs["dataset_index"] = torch.zeros(len(boxes), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            outputs = self.model(**inputs)
        outputs.heatmaps = outputs.heatmaps.float().cpu()
        people = self.processor.post_process_pose_estimation(outputs, boxes=[boxes])[0]
        return [(p["keypoints"].tolist(), p["scores"].tolist()) for p in people]


class ImageToPoseTool(ExpertTool):
    name = "image-to-pose"
    task = "keypoint-detection"  # the Hub's tag of VitPose; run by the model class and its processor
    default_model = "usyd-community/vitpose-base-simple"
    description = (
        "image-to-pose: detects the body pose of the people in an image (head, shoulders, arms, hips, legs) and "
        "draws it as a coloured stick-figure skeleton on black. Use it when the user wants the pose of a person, "
        "or as the first step of pose-to-image (a new image of someone in the same pose). "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: the name of the pose image and how many people and body points were found. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "Pose map of image/1a2b3c4d.png: '
        'image/5e6f7a8b_pose_1a2b3c4d_1a2b3c4d.png (512x512, OpenPose skeleton on black, 1 person ...)".'
    )
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"detector": "", "detector_threshold": 0.5, "keypoint_threshold": 0.3, "max_people": 10}

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            processor = transformers.AutoImageProcessor.from_pretrained(location, token=token)
            # Any: transformers' stubs give ``model.to`` an unbound signature
            model: Any = transformers.VitPoseForPoseEstimation.from_pretrained(location, dtype=args["dtype"],
                                                                               token=token)
            return PoseModel(model.to(device).eval(), processor, device)

        return self.load_checkpoint(build, device, dtype)

    def call_remote(self, endpoint: Any, **inputs: Any) -> Any:
        return local_only(self)

    def person_boxes(self, picture: Any) -> list[list[float]] | None:
        """``[x, y, w, h]`` of each person the detector finds, most certain first; None without a detector."""
        detector = str(self.options["detector"] or "").strip()
        if not detector:
            return None
        from ..runtime.models.loading import load_pipeline

        key = (detector, "object-detection", self.device, self.dtype)
        prefix = tool_key(self.name)
        pipe = self.manager.get(key, lambda: load_pipeline(
            "object-detection", detector, device=self.device, dtype=self.dtype, tool=self.name,
            setting=f"{prefix}_detector", token=self.hf_token), device=self.device)
        threshold = float(self.options["detector_threshold"])
        with self.manager.call_lock(key):
            found = pipe(picture, threshold=threshold)
        boxes = []
        for label, score, record in _scored(_records(found)):
            box = record.get("box") or {}
            if label.strip().lower() != "person" or score < threshold:
                continue
            try:
                x0, y0, x1, y1 = (float(box[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
            except (KeyError, TypeError, ValueError):
                continue
            x0, x1 = sorted((max(0.0, x0), min(float(picture.width), x1)))
            y0, y1 = sorted((max(0.0, y0), min(float(picture.height), y1)))
            if x1 - x0 >= 2 and y1 - y0 >= 2:
                boxes.append([x0, y0, x1 - x0, y1 - y0])
        return boxes

    def call_local(self, model: Any, *, image: str) -> Any:
        picture = open_image(image)
        boxes = self.person_boxes(picture)
        detected = boxes is not None
        if boxes is None:
            boxes = [[0.0, 0.0, float(picture.width), float(picture.height)]]
        boxes = boxes[: max(1, int(self.options["max_people"]))]
        return {"size": picture.size, "people": model(picture, boxes), "detector": detected}

    def render(self, result: Any, *, image: str) -> ToolResult:
        size = tuple(result["size"])
        threshold = float(self.options["keypoint_threshold"])
        people = [openpose_points(keypoints, scores, threshold, size) for keypoints, scores in result["people"]]
        people = [p for p in people if any(point is not None for point in p)]
        counts = ", ".join(f"{sum(point is not None for point in p)}" for p in people)
        if people:
            details = (f"OpenPose skeleton on black, {len(people)} {'person' if len(people) == 1 else 'people'} "
                       f"with {counts} of 18 body points")
        elif result.get("detector"):
            details = "empty: the detector found no person"
        else:
            details = f"empty: no body point scored at least {threshold:.2f}"
        return condition_result(self, draw_openpose(size, people), image, "pose", "Pose map", details,
                                "pose-to-image")

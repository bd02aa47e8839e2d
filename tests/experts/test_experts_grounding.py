"""zero-shot-object-detection on a tiny random OWL-ViT, its plain-text input, and the inference API's shape;
segment-by-text (OWL-ViT boxes -> SAM masks) on a tiny random SAM."""

from __future__ import annotations

import json
import re

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.grounding import SegmentByTextTool, ZeroShotObjectDetectionTool, parse_labels
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")

MATCH = re.compile(r"- (.+) (\d\.\d\d) \[(\d+), (\d+), (\d+), (\d+)\]")


@pytest.fixture(scope="session")
def sam_dir(tmp_path_factory) -> str:
    """A tiny SAM with a tiny OWL-ViT in its ``detector/`` folder (``BUILDERS["segment-by-text"]``)."""
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    return BUILDERS["segment-by-text"](tmp_path_factory.mktemp("tiny-sam"))


@pytest.fixture(scope="session")
def owlvit_dir(sam_dir) -> str:
    """The tiny OWL-ViT (``BUILDERS["zero-shot-object-detection"]``, built into the SAM folder)."""
    return f"{sam_dir}/detector"


def annotated(observation: str, image_file: str) -> str:
    uuid = image_file.split("/")[1][:8]
    match = re.fullmatch(rf"Annotated image: (image/[0-9a-f]{{8}}_detect_{uuid}_{uuid}\.png)",
                         observation.splitlines()[-1])
    assert match, observation
    assert observation.value == match.group(1)
    return match.group(1)


def test_boxes_for_free_text_labels(owlvit_dir, image_file, workspace):
    from PIL import Image

    tool = ZeroShotObjectDetectionTool.from_config(zero_shot_object_detection_model=owlvit_dir,
                                                   zero_shot_object_detection_threshold=0,
                                                   zero_shot_object_detection_max_objects=5)
    observation = tool.run({"image": image_file, "labels": "cat, red car"})
    lines = observation.splitlines()
    count = int(re.match(rf"Found (\d+) match\(es\) for cat, red car in {image_file} ", lines[0]).group(1))
    assert count >= 1
    shown = lines[1:1 + min(count, 5)]
    scores = []
    for line in shown:
        match = MATCH.fullmatch(line)
        assert match and match.group(1) in ("cat", "red car"), line
        x0, y0, x1, y1 = (int(v) for v in match.groups()[2:])
        assert 0 <= x0 <= x1 <= 95 and 0 <= y0 <= y1 <= 63  # clipped to the 96x64 image
        scores.append(float(match.group(2)))
    assert scores == sorted(scores, reverse=True)
    if count > 5:
        assert lines[6] == f"... and {count - 5} more"
    name = annotated(observation, image_file)
    with Image.open(workspace / name) as drawn, Image.open(workspace / image_file) as original:
        assert drawn.size == original.size and drawn.tobytes() != original.tobytes()


def test_plain_text_input_and_label_lists(owlvit_dir, image_file):
    tool = ZeroShotObjectDetectionTool(model=owlvit_dir, device="cpu", manager=ModelManager(),
                                       options={"threshold": 0.0})
    plain = tool.run(f"{image_file}, dog, a photo of a cat")
    assert plain.startswith("Found ") and " for dog, a photo of a cat in " in plain.splitlines()[0]
    listed = tool.run({"image": image_file, "labels": ["dog", " dog ", "car"]})
    assert " for dog, car in " in listed.splitlines()[0]
    assert tool.model_key == (owlvit_dir, "zero-shot-object-detection", "cpu", "float32")


def test_threshold_filters_everything(owlvit_dir, image_file, workspace):
    tool = ZeroShotObjectDetectionTool.from_config(zero_shot_object_detection_model=owlvit_dir,
                                                   zero_shot_object_detection_threshold=1.01)
    observation = tool.run({"image": image_file, "labels": "cat"})
    assert observation == (f"Nothing matching cat found in {image_file} with a score of at least 1.01 "
                           f"(set zero_shot_object_detection_threshold lower to see weaker matches).")
    assert sorted(p.name for p in (workspace / "image").iterdir()) == [image_file.split("/")[1]]


def test_labels_are_required_and_bounded(image_file, workspace):
    tool = ZeroShotObjectDetectionTool(model="./never-loaded", device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="needs the names of what to look for"):
        tool.run({"image": image_file, "labels": " , ;"})
    with pytest.raises(ToolInputError, match="at most 32 labels"):
        tool.run({"image": image_file, "labels": ", ".join(f"thing {i}" for i in range(40))})
    with pytest.raises(ToolInputError, match="file 'image/none.png' does not exist"):
        tool.run({"image": "image/none.png", "labels": "cat"})
    assert tool.manager.stats()["loads"] == 0
    assert parse_labels("cat; Cat,\n dog.  ,'red  car'") == ["cat", "dog", "red car"]


def test_remote_body_and_answer(fake_endpoint, image_file):
    fake_endpoint.reply_json([{"score": 0.42, "label": "cat", "box": {"xmin": 10, "ymin": 5, "xmax": 200, "ymax": 60}},
                              {"score": 0.05, "label": "cat", "box": {"xmin": 1, "ymin": 1, "xmax": 2, "ymax": 2}},
                              {"label": "broken"}])
    tool = ZeroShotObjectDetectionTool.from_config(zero_shot_object_detection_endpoint=fake_endpoint.url)
    lines = tool.run({"image": image_file, "labels": "cat, dog"}).splitlines()
    assert lines[:2] == [f"Found 1 match(es) for cat, dog in {image_file} (boxes are [xmin, ymin, xmax, ymax] in "
                         f"pixels):", "- cat 0.42 [10, 5, 95, 60]"]
    body = json.loads(fake_endpoint.requests[0]["body"])
    assert body["parameters"] == {"candidate_labels": ["cat", "dog"]} and isinstance(body["inputs"], str)


def test_missing_model_names_the_setting(image_file, tmp_path):
    tool = ZeroShotObjectDetectionTool.from_config(zero_shot_object_detection_model=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set zero_shot_object_detection_model"):
        tool.run({"image": image_file, "labels": "cat"})
    offline = ZeroShotObjectDetectionTool.from_config(zero_shot_object_detection_model="chatgpt-tool-hub-tests/none")
    with pytest.raises(ToolExecutionError, match="set zero_shot_object_detection_model to a local path"):
        offline.run({"image": image_file, "labels": "cat"})


# ---- segment-by-text ---------------------------------------------------------------------------------


OBJECT = re.compile(r"- (.+) (\d\.\d\d) \[(\d+), (\d+), (\d+), (\d+)\], (\d+\.\d)% of the image \((\w+)\), "
                    r"mask quality (-?\d\.\d\d)")


def test_segment_by_text_masks_the_detected_boxes(sam_dir, image_file, workspace):
    import numpy as np
    from PIL import Image

    manager = ModelManager()
    tool = SegmentByTextTool(model=sam_dir, device="cpu", manager=manager, workspace_dir=workspace,
                             options={"threshold": 0.0, "max_objects": 3})
    assert tool.detector == f"{sam_dir}/detector"  # the bundled detector, as no other is set
    observation = tool.run({"image": image_file, "labels": "cat, ball"})
    lines = observation.splitlines()
    count = int(re.match(rf"Found (\d) object\(s\) matching cat, ball in {image_file} ", lines[0]).group(1))
    assert 1 <= count <= 3 and len(lines) == count + 3
    shares = []
    for line in lines[1:1 + count]:
        match = OBJECT.fullmatch(line)
        assert match and match.group(1) in ("cat", "ball"), line
        shares.append(float(match.group(7)))
    uuid = image_file.split("/")[1][:8]
    overlay = re.fullmatch(rf"Segmentation image: (image/[0-9a-f]{{8}}_segment_{uuid}_{uuid}\.png)", lines[-2])
    mask = re.fullmatch(rf"Mask \(white = the objects\): (image/[0-9a-f]{{8}}_mask_{uuid}_{uuid}\.png)", lines[-1])
    assert overlay and mask and observation.value == mask.group(1)
    with Image.open(workspace / mask.group(1)) as union, Image.open(workspace / overlay.group(1)) as painted:
        assert union.mode == "L" and union.size == painted.size == (96, 64)
        white = np.asarray(union) > 0
        assert set(np.unique(np.asarray(union))) <= {0, 255}
    assert max(shares) - 0.1 <= 100 * white.mean() <= sum(shares) + 0.1  # the union of the objects' masks
    assert manager.stats()["loads"] == 2  # SAM and the detector

    detector = ZeroShotObjectDetectionTool(model=f"{sam_dir}/detector", device="cpu", manager=manager,
                                           workspace_dir=workspace, options={"threshold": 0.0})
    assert detector.run({"image": image_file, "labels": "cat"}).startswith("Found")
    assert manager.stats()["loads"] == 2  # the zero-shot tool reuses segment-by-text's detector


def test_segment_by_text_settings(sam_dir, owlvit_dir, image_file, workspace, tmp_path):
    shared = SegmentByTextTool.from_config(segment_by_text_model=sam_dir, zero_shot_object_detection_model="x/owl")
    assert shared.detector == "x/owl"  # the zero-shot tool's model, so one load serves both
    own = SegmentByTextTool.from_config(segment_by_text_model=sam_dir, segment_by_text_detector=owlvit_dir,
                                        zero_shot_object_detection_model="x/owl")
    assert own.detector == owlvit_dir
    assert SegmentByTextTool.from_config().detector == "google/owlvit-base-patch32"
    strict = SegmentByTextTool.from_config(segment_by_text_model=sam_dir, segment_by_text_threshold=1.01)
    assert strict.run(f"{image_file}, cat").startswith(f"Nothing matching cat found in {image_file} ")
    assert sorted(p.name for p in (workspace / "image").iterdir()) == [image_file.split("/")[1]]
    missing = SegmentByTextTool.from_config(segment_by_text_model=sam_dir,
                                            segment_by_text_detector=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set segment_by_text_detector"):
        missing.run(f"{image_file}, cat")


def test_segment_by_text_is_local_only(fake_endpoint, image_file):
    tool = SegmentByTextTool.from_config(segment_by_text_endpoint=fake_endpoint.url)
    with pytest.raises(ToolExecutionError, match="only locally; unset segment_by_text_endpoint"):
        tool.run({"image": image_file, "labels": "cat"})
    with pytest.raises(ToolInputError, match="needs the names of what to look for"):
        tool.run({"image": image_file, "labels": ""})

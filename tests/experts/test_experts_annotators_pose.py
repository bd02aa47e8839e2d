"""image-to-pose: VitPose keypoints drawn as an OpenPose skeleton, on a tiny random VitPose (and a tiny person
detector); the OpenPose drawing convention on known keypoints."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.annotators_pose import OPENPOSE_COLORS, ImageToPoseTool, draw_openpose, openpose_points
from chatgpt_tool_hub.runtime.models.manager import ModelManager

np = pytest.importorskip("numpy")
pytest.importorskip("torch")
pytest.importorskip("transformers")

POSE = re.compile(r"Pose map of (\S+): (image/[0-9a-f]{8}_pose_([0-9a-f]{8})_([0-9a-f]{8})\.png) \((\d+)x(\d+), "
                  r"(.*); the image input of pose-to-image\)\.")


@pytest.fixture(scope="session")
def vitpose_dir(tmp_path_factory) -> str:
    from chatgpt_tool_hub.experts.tiny.annotators import build_vitpose

    return build_vitpose(tmp_path_factory.mktemp("tiny-vitpose"))


@pytest.fixture(scope="session")
def person_detector_dir(tmp_path_factory) -> str:
    """A tiny YOLOS whose only class is "person" (5 detection tokens)."""
    import torch
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    folder = tmp_path_factory.mktemp("tiny-person-detector")
    config = YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16, num_detection_tokens=5, id2label={0: "person"}, label2id={"person": 0})
    torch.manual_seed(1)
    YolosForObjectDetection(config).save_pretrained(folder)
    YolosImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return str(folder)


def pose_map(workspace, observation: str, image_file: str):
    from PIL import Image

    match = POSE.fullmatch(observation)
    assert match, observation
    uuid = image_file.split("/")[1][:8]
    assert match[1] == image_file and match[3] == match[4] == uuid and observation.value == match[2]
    with Image.open(workspace / match[2]) as picture:
        picture.load()
        return match, picture.copy()


def test_pose_map_of_the_whole_image(vitpose_dir, image_file, workspace):
    tool = ImageToPoseTool.from_config(image_to_pose_model=vitpose_dir, image_to_pose_keypoint_threshold=0,
                                       image_to_pose_device="cpu")
    match, picture = pose_map(workspace, tool.run(image_file), image_file)
    assert picture.mode == "RGB" and picture.size == (96, 64) and (match[5], match[6]) == ("96", "64")
    points = int(re.fullmatch(r"OpenPose skeleton on black, 1 person with (\d+) of 18 body points", match[7])[1])
    assert 1 <= points <= 18
    pixels = np.asarray(picture).reshape(-1, 3)
    assert (pixels == 0).all(axis=1).mean() > 0.5  # mostly black
    full = {tuple(c) for c in OPENPOSE_COLORS}
    assert {tuple(p) for p in pixels} & full  # the joints are drawn in OpenPose's colours
    assert type(tool.load().model).__name__ == "VitPoseForPoseEstimation"


def test_no_keypoint_above_the_threshold_gives_an_empty_map(vitpose_dir, image_file, workspace):
    tool = ImageToPoseTool.from_config(image_to_pose_model=vitpose_dir, image_to_pose_keypoint_threshold=1.01)
    match, picture = pose_map(workspace, tool.run({"image": image_file}), image_file)
    assert match[7] == "empty: no body point scored at least 1.01"
    assert not np.asarray(picture).any()


def test_person_boxes_come_from_the_detector_through_the_manager(vitpose_dir, person_detector_dir, image_file,
                                                                 workspace):
    from chatgpt_tool_hub.experts.vision import ObjectDetectionTool

    manager = ModelManager()
    tool = ImageToPoseTool(model=vitpose_dir, device="cpu", manager=manager, workspace_dir=workspace,
                           options={"detector": person_detector_dir, "detector_threshold": 0.0,
                                    "keypoint_threshold": 0.0, "max_people": 3})
    match, _ = pose_map(workspace, tool.run(image_file), image_file)
    people = re.fullmatch(r"OpenPose skeleton on black, (\d) (person|people) with ([\d, ]+) of 18 body points",
                          match[7])
    assert people and 1 <= int(people[1]) <= 3 and len(people[3].split(", ")) == int(people[1])
    assert manager.stats()["loads"] == 2  # VitPose and the detector
    detector = ObjectDetectionTool(model=person_detector_dir, device="cpu", manager=manager, workspace_dir=workspace,
                                   options={"threshold": 0.0})
    assert detector.run(image_file).startswith("Found")
    assert manager.stats()["loads"] == 2  # object-detection reuses the pose tool's detector

    strict = ImageToPoseTool(model=vitpose_dir, device="cpu", manager=manager, workspace_dir=workspace,
                             options={"detector": person_detector_dir, "detector_threshold": 1.01})
    match, picture = pose_map(workspace, strict.run(image_file), image_file)
    assert match[7] == "empty: the detector found no person" and not np.asarray(picture).any()


def test_a_missing_detector_names_its_setting(vitpose_dir, image_file, tmp_path):
    tool = ImageToPoseTool.from_config(image_to_pose_model=vitpose_dir,
                                       image_to_pose_detector=str(tmp_path / "no-detector"))
    with pytest.raises(ToolExecutionError, match="no such folder; set image_to_pose_detector"):
        tool.run(image_file)


def test_openpose_points_and_colours_follow_openpose():
    # COCO-17 keypoints of a person standing in a 200x200 image
    coco = [(100, 30), (95, 25), (105, 25), (88, 28), (112, 28), (80, 60), (120, 60), (70, 95), (130, 95),
            (65, 130), (135, 130), (88, 120), (112, 120), (86, 160), (114, 160), (85, 195), (115, 195)]
    scores = [0.9] * 17
    scores[9] = 0.1  # the left wrist is not seen
    points = openpose_points(coco, scores, 0.3, (200, 200))
    assert len(points) == 18
    assert points[0] == (100, 30) and points[1] == (100, 60)  # nose; the neck between the shoulders
    assert points[2] == (120, 60) and points[5] == (80, 60)  # OpenPose's right shoulder is COCO's 6, left 5
    assert points[7] is None  # the unseen left wrist
    assert points[14:] == [(105, 25), (95, 25), (112, 28), (88, 28)]  # right eye, left eye, right ear, left ear
    picture = np.asarray(draw_openpose((200, 200), [points]))
    assert tuple(picture[60, 100]) == OPENPOSE_COLORS[1]  # the neck's dot
    assert tuple(picture[60, 120]) == OPENPOSE_COLORS[2]  # the right shoulder's dot
    limb = tuple(picture[60, 110])  # halfway along neck -> right shoulder, OpenPose's first limb: 60% red
    assert limb == (153, 0, 0)
    assert tuple(picture[195, 115]) == OPENPOSE_COLORS[10]  # the right ankle (COCO 16, OpenPose 10)
    assert openpose_points(coco, scores, 0.3, (50, 50))[0] is None  # outside the image: not drawn
    assert not np.asarray(draw_openpose((20, 10), [[None] * 18])).any()


def test_bad_input_and_missing_model(image_file, workspace, tmp_path):
    (workspace / "notes.txt").write_text("hello")
    tool = ImageToPoseTool(model="./never-loaded", device="cpu", manager=ModelManager(), workspace_dir=workspace)
    with pytest.raises(ToolInputError, match="file 'image/none.png' does not exist"):
        tool.run("image/none.png")
    assert tool.manager.stats()["loads"] == 0
    missing = ImageToPoseTool.from_config(image_to_pose_model=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set image_to_pose_model"):
        missing.run(image_file)


def test_not_an_image(vitpose_dir, workspace):
    (workspace / "notes.txt").write_text("hello")
    tool = ImageToPoseTool.from_config(image_to_pose_model=vitpose_dir)
    with pytest.raises(ToolInputError, match="not an image"):
        tool.run("notes.txt")

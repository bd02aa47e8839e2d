"""Image and video processing tools: crop, resize, rotate, convert, grid, frames out of and into videos."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import main_tool_register

from helpers import act, answer

Image = pytest.importorskip("PIL.Image")

CHAINED = r"image/[0-9a-f]{{8}}_{op}_{prev}_{org}\.png"
RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


@pytest.fixture
def workspace(isolated_env):
    root = isolated_env / "workspace"
    (root / "image").mkdir(parents=True)
    return root


def picture(workspace, name: str, size=(40, 20), color=BLUE, corner=RED) -> str:
    """``image/<name>.png``: ``color`` with a 4x4 ``corner`` square at the top left."""
    image = Image.new("RGB", size, color)
    image.paste(corner, (0, 0, 4, 4))
    image.save(workspace / "image" / f"{name}.png")
    return f"image/{name}.png"


def build(name: str, **settings):
    return main_tool_register.build(name, workspace_dir="workspace", **settings)


def opened(workspace, name: str):
    with Image.open(workspace / name) as image:
        image.load()
        return image.copy()


def test_every_media_tool_is_registered_and_not_a_default():
    names = ["image-crop", "image-resize", "image-rotate", "image-convert", "image-grid", "video-frames",
             "frames-to-video"]
    entries = {entry.name: entry for entry in main_tool_register.entries()}
    for name in names:
        assert name in entries and not entries[name].default and entries[name].required_keys == []


def test_crop_in_pixels_names_the_output_after_its_input_and_hands_it_on(workspace):
    source = picture(workspace, "1a2b3c4d")
    out = build("image-crop").run({"image": source, "box": [0, 0, 10, 8]})
    name = re.search(CHAINED.format(op="crop", prev="1a2b3c4d", org="1a2b3c4d"), out).group(0)
    assert out == f"Cropped {source} to {name} (10x8)." and out.value == name
    cropped = opened(workspace, name)
    assert cropped.size == (10, 8) and cropped.getpixel((0, 0)) == RED and cropped.getpixel((9, 7)) == BLUE
    # the chain goes on: crop of the crop keeps the original's id
    again = build("image-crop").run({"image": name, "box": [0, 0, 2, 2]})
    assert re.search(CHAINED.format(op="crop", prev=name[6:14], org="1a2b3c4d"), again)


def test_crop_in_fractions_and_boxes_that_miss(workspace):
    source = picture(workspace, "1a2b3c4d", size=(40, 20))
    out = build("image-crop").run({"image": source, "box": [0.5, 0, 1, 1]})
    assert opened(workspace, out.value).size == (20, 20)
    with pytest.raises(ToolInputError, match="leaves nothing"):
        build("image-crop").run({"image": source, "box": [50, 50, 60, 60]})
    with pytest.raises(ToolInputError):  # the schema wants four numbers
        build("image-crop").run({"image": source, "box": [1, 2, 3]})


def test_inputs_outside_the_workspace_and_files_that_are_not_images_are_refused(workspace, tmp_path):
    Image.new("RGB", (4, 4)).save(tmp_path / "outside.png")
    with pytest.raises(ToolInputError, match="outside the workspace"):
        build("image-resize").run({"image": "../outside.png", "width": 2})
    (workspace / "image" / "notes.png").write_text("not an image")
    with pytest.raises(ToolInputError, match="not an image image-resize can read"):
        build("image-resize").run({"image": "image/notes.png", "width": 2})
    with pytest.raises(ToolInputError, match="does not exist"):
        build("image-resize").run({"image": "image/nope.png", "width": 2})


def test_a_decompression_bomb_is_refused_before_it_is_decoded(workspace, monkeypatch):
    import chatgpt_tool_hub.runtime.filenames as files

    source = picture(workspace, "big", size=(40, 20))
    monkeypatch.setattr(files, "MAX_INPUT_PIXELS", 100)
    with pytest.raises(ToolInputError, match="pixels"):
        build("image-rotate").run({"image": source, "degrees": 90})


def test_resize_by_width_height_both_or_scale_and_its_limit(workspace):
    source = picture(workspace, "1a2b3c4d", size=(40, 20))
    tool = build("image-resize")
    assert opened(workspace, tool.run({"image": source, "width": 20}).value).size == (20, 10)
    assert opened(workspace, tool.run({"image": source, "height": 40}).value).size == (80, 40)
    assert opened(workspace, tool.run({"image": source, "width": 7, "height": 9}).value).size == (7, 9)
    out = tool.run({"image": source, "scale": 0.5})
    assert out.startswith(f"Resized {source} (40x20) to image/") and out.endswith("(20x10).")
    with pytest.raises(ToolInputError, match="needs a width, a height or a scale"):
        tool.run({"image": source})
    with pytest.raises(ToolInputError, match=r"more than 64 a side \(image_resize_max_side\)"):
        build("image-resize", image_resize_max_side=64).run({"image": source, "width": 200})


def test_rotate_is_clockwise_lossless_for_right_angles_and_flips(workspace):
    source = picture(workspace, "1a2b3c4d", size=(40, 20))
    tool = build("image-rotate")
    turned = opened(workspace, tool.run({"image": source, "degrees": 90}).value)
    assert turned.size == (20, 40)
    assert turned.getpixel((19, 0)) == RED          # the top-left corner went to the top right
    flipped = opened(workspace, tool.run({"image": source, "flip": "horizontal"}).value)
    assert flipped.size == (40, 20) and flipped.getpixel((39, 0)) == RED
    out = tool.run({"image": source, "degrees": 45})
    tilted = opened(workspace, out.value)
    assert tilted.width > 40 and tilted.height > 20 and tilted.getpixel((0, 0)) == WHITE  # grown, white corners
    assert "by 45 degrees clockwise" in out
    with pytest.raises(ToolInputError, match="needs an angle or a flip"):
        tool.run({"image": source, "degrees": 360})


def test_convert_to_jpeg_grayscale_and_transparent_images_onto_white(workspace):
    source = picture(workspace, "1a2b3c4d")
    out = build("image-convert").run({"image": source, "format": "jpeg", "mode": "grayscale", "quality": 80})
    assert out.value.endswith(".jpg") and "(JPEG, L, 40x20," in out
    assert (workspace / out.value).read_bytes()[:3] == b"\xff\xd8\xff"
    assert opened(workspace, out.value).mode == "L"
    clear = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    clear.save(workspace / "image" / "clear.png")
    flat = opened(workspace, build("image-convert").run({"image": "image/clear.png", "format": "jpg"}).value)
    assert flat.mode == "RGB" and all(channel > 240 for channel in flat.getpixel((4, 4)))
    webp = build("image-convert").run({"image": source, "format": "webp"})
    assert webp.value.endswith(".webp") and (workspace / webp.value).read_bytes()[8:12] == b"WEBP"
    with pytest.raises(ToolInputError):
        build("image-convert").run({"image": source, "format": "eps"})   # not offered: it runs Ghostscript


def test_grid_lays_images_out_in_rows_and_columns(workspace):
    names = [picture(workspace, f"c{i}", size=(30, 30), color=color, corner=color)
             for i, color in enumerate((RED, GREEN, BLUE))]
    out = build("image-grid").run({"images": names, "columns": 2, "cell": 32, "gap": 2})
    assert "Composed 3 images in 2 rows of 2 columns" in out and out.endswith("(66x66).")
    sheet = opened(workspace, out.value)
    assert sheet.getpixel((16, 16)) == RED and sheet.getpixel((50, 16)) == GREEN and sheet.getpixel((16, 50)) == BLUE
    assert sheet.getpixel((50, 50)) == WHITE        # the empty fourth cell
    text = build("image-grid").run({"images": f"{names[0]}, {names[1]}"})   # a text of paths works too
    assert "in 1 row of 2 columns" in text
    with pytest.raises(ToolInputError, match="takes at most 36"):
        build("image-grid").run({"images": [names[0]] * 37})


def _colour_frames(workspace, name: str, fmt: str) -> str:
    from chatgpt_tool_hub.runtime.video_io import write_video

    (workspace / "video").mkdir(exist_ok=True)
    frames = [Image.new("RGB", (32, 16), color) for color in (RED, GREEN, BLUE)]
    write_video(frames, workspace / "video" / f"{name}.{fmt}", fps=3)
    return f"video/{name}.{fmt}"


def _close(pixel, color, tolerance=60) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, color, strict=False))


def test_video_frames_from_a_gif_are_pngs_in_order(workspace):
    video = _colour_frames(workspace, "5e6f7a8b", "gif")
    out = build("video-frames").run({"video": video, "count": 3})
    names = out.value.split(", ")
    assert len(names) == 3 and out.startswith(f"Took 3 frames from {video}: ") and out.endswith("(32x16).")
    for name, color in zip(names, (RED, GREEN, BLUE), strict=False):
        assert re.fullmatch(CHAINED.format(op="frame", prev="5e6f7a8b", org="5e6f7a8b"), name)
        assert _close(opened(workspace, name).getpixel((5, 5)), color)


def test_video_frames_from_an_mp4(workspace):
    pytest.importorskip("av")
    video = _colour_frames(workspace, "5e6f7a8b", "mp4")
    out = build("video-frames").run({"video": video, "count": 2})
    names = out.value.split(", ")
    assert len(names) == 2
    assert _close(opened(workspace, names[0]).getpixel((5, 5)), RED)
    assert _close(opened(workspace, names[1]).getpixel((5, 5)), BLUE)


def test_frames_to_gif_and_mp4_and_back(workspace):
    from chatgpt_tool_hub.runtime.video_io import read_frames, video_info

    names = [picture(workspace, f"f{i}", size=(32, 16), color=color, corner=color)
             for i, color in enumerate((RED, GREEN, BLUE))]
    names.append(picture(workspace, "odd", size=(64, 64), color=WHITE, corner=WHITE))   # resized to the first
    out = build("frames-to-video").run({"images": names, "fps": 2})
    assert re.fullmatch(r"Made video/[0-9a-f]{8}_video_f0_f0\.gif \(4 frames, 32x16, 2 fps\)\.", out)
    assert video_info(workspace / out.value) == {"frames": 4, "width": 32, "height": 16}
    frames = read_frames(workspace / out.value, max_frames=4)
    assert _close(frames[1].getpixel((5, 5)), GREEN)
    pytest.importorskip("av")
    mp4 = build("frames-to-video").run({"images": names[:3], "fps": 3, "format": "mp4"})
    assert mp4.value.endswith(".mp4") and (workspace / mp4.value).read_bytes()[4:8] == b"ftyp"
    assert video_info(workspace / mp4.value)["frames"] == 3


def test_an_app_chains_the_media_tools_through_their_file_names(workspace):
    source = picture(workspace, "1a2b3c4d", size=(40, 20))

    def resize_what_was_cropped(messages):
        cropped = re.search(r"image/\S+_crop_\S+\.png", messages[-1]["content"]).group(0)
        return act("image-resize", f'{{"image": "{cropped}", "scale": 2}}')

    llm = ScriptedLLM([act("image-crop", f'{{"image": "{source}", "box": [0, 0, 20, 10]}}'), resize_what_was_cropped,
                       answer("Done.")])
    app = AppFactory().create_app(tools_list=["image-crop", "image-resize"], llm=llm, no_default=True,
                                  workspace_dir="workspace")
    result = app.run("Crop the top-left quarter and make it twice as big")
    assert [step.tool for step in result.steps] == ["image-crop", "image-resize"]
    final = re.search(r"image/\S+_resize_\S+_1a2b3c4d\.png", result.steps[1].observation).group(0)
    assert opened(workspace, final).size == (40, 20)


def test_the_example_runs_offline(tmp_path):
    from test_examples import EXAMPLES, ok, run_python

    out = ok(run_python(EXAMPLES / "media_tools.py", tmp_path))
    assert re.search(r"image-rotate: Rotated image/[0-9a-f]{8}_crop_sun_sun\.png by 90 degrees clockwise", out)
    assert "Composed 4 images in 2 rows of 2 columns" in out
    assert re.search(r"Made video/[0-9a-f]{8}_video_sun_sun\.gif \(3 frames, 160x120, 2 fps\)", out)
    assert "Took 3 frames from video/" in out and "(JPEG, L, 160x120," in out
    assert "11 files in the workspace" in out


def test_a_missing_pillow_and_a_bad_setting_say_how_to_fix_them(workspace, monkeypatch):
    import sys

    from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError

    with pytest.raises(ConfigError, match="image_crop_max_side"):
        build("image-crop", image_crop_max_side=8)
    source = picture(workspace, "1a2b3c4d")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ToolExecutionError, match=r'image-crop needs Pillow, .*pip install "chatgpt-tool-hub\[media\]"'):
        build("image-crop").run({"image": source, "box": [0, 0, 2, 2]})

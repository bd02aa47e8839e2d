"""Visual ChatGPT file discipline: ingest, chained output names, confinement to the workspace."""

from __future__ import annotations

import os
import re
import wave

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.runtime import filenames as files

UUID = r"[0-9a-f]{8}"


def test_output_name_of_an_original():
    out = files.output_path("image/abcd1234.png", "detect")
    assert re.fullmatch(rf"image/({UUID})_detect_abcd1234_abcd1234\.png", out)


def test_output_name_chains_prev_and_org():
    first = files.output_path("image/abcd1234.png", "detect")
    new = os.path.basename(first).split("_")[0]
    second = files.output_path(first, "depth")
    assert re.fullmatch(rf"image/{UUID}_depth_{new}_abcd1234\.png", second)
    third = files.output_path(second, "canny", "jpg")
    assert third.endswith("_abcd1234.jpg") and third.split("_")[2] == os.path.basename(second).split("_")[0]


def test_output_name_of_unusual_inputs():
    assert re.fullmatch(rf"{UUID}_pose_my-photo_my-photo\.png", files.output_path("my_photo.png", "pose"))
    assert re.fullmatch(rf"audio/{UUID}_tts_x_x\.wav", files.output_path("audio/x.wav", "tts", ".wav"))
    assert "_edge-map_" in files.output_path("image/abcd1234.png", "edge_map")  # op keeps 4 parts


def test_ingest_image_resizes_long_side(workspace):
    from PIL import Image

    big = workspace.parent / "big.png"
    Image.new("RGBA", (2000, 1000), (10, 20, 30, 255)).save(big)
    rel = files.ingest_image(big, workspace)
    assert re.fullmatch(rf"image/{UUID}\.png", rel)
    with Image.open(workspace / rel) as img:
        assert img.size == (512, 256) and img.mode == "RGB"


def test_ingest_image_keeps_small_and_accepts_pil(workspace):
    from PIL import Image

    rel = files.ingest_image(Image.new("L", (100, 300)), workspace)
    with Image.open(workspace / rel) as img:
        assert img.size == (100, 300) and img.mode == "RGB"
    tall = files.ingest_image(Image.new("RGB", (600, 1200)), workspace)
    with Image.open(workspace / tall) as img:
        assert img.size == (256, 512)


def test_ingest_image_errors(workspace):
    with pytest.raises(ToolInputError, match="does not exist"):
        files.ingest_image(workspace / "missing.png", workspace)
    text = workspace / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ToolInputError, match="not an image"):
        files.ingest_image(text, workspace)


def test_audio_roundtrip(workspace):
    np = pytest.importorskip("numpy")
    tone = np.sin(np.linspace(0, 2 * np.pi * 440, 16000)).astype("float32") * 0.5
    rel = files.ingest_audio(tone, workspace, sampling_rate=16000)
    assert re.fullmatch(rf"audio/{UUID}\.wav", rel)
    data, rate = files.read_wav(workspace / rel)
    assert rate == 16000 and data.shape == (16000,)
    assert np.allclose(data, tone, atol=1e-3)
    stereo = (np.stack([tone, tone], axis=1) * 32767).astype("int16")
    copied = files.ingest_audio(workspace / rel, workspace)  # a WAV file is copied as is
    assert copied != rel and (workspace / copied).read_bytes() == (workspace / rel).read_bytes()
    with wave.open(str(workspace / files.ingest_audio(stereo, workspace, 8000))) as w:
        assert (w.getnchannels(), w.getframerate()) == (2, 8000)


def test_audio_errors(workspace):
    with pytest.raises(ToolInputError, match="sampling_rate"):
        files.ingest_audio([0.0, 0.1], workspace)
    bad = workspace / "x.wav"
    bad.write_bytes(b"not a wav")
    with pytest.raises(ToolInputError, match="not a WAV"):
        files.ingest_audio(bad, workspace)


def test_resolve_input(workspace):
    (workspace / "image").mkdir(exist_ok=True)
    (workspace / "image" / "a.png").write_bytes(b"x")
    expected = os.path.realpath(workspace / "image" / "a.png")
    assert files.resolve_input("image/a.png", workspace, "image") == expected
    assert files.resolve_input(" 'image/a.png' ", workspace, "image") == expected
    assert files.resolve_input(str(workspace / "image" / "a.png"), workspace, "image") == expected
    assert files.resolve_input("workspace/image/a.png", workspace, "image") == expected  # from the cwd


def test_resolve_input_refuses(workspace):
    with pytest.raises(ToolInputError) as info:
        files.resolve_input("image/nope.png", workspace, "image")
    assert str(info.value) == ("file 'image/nope.png' does not exist; use a file name from an earlier "
                               "observation, never invent one")
    outside = workspace.parent / "secret.png"
    outside.write_bytes(b"x")
    for escape in ("../secret.png", str(outside)):
        with pytest.raises(ToolInputError, match="outside the workspace"):
            files.resolve_input(escape, workspace, "image")
    (workspace / "link.png").symlink_to(outside)
    with pytest.raises(ToolInputError, match="outside the workspace"):
        files.resolve_input("link.png", workspace, "image")
    with pytest.raises(ToolInputError, match="needs the path"):
        files.resolve_input("", workspace, "image")
    (workspace / "image").mkdir(exist_ok=True)
    with pytest.raises(ToolInputError, match="does not exist"):
        files.resolve_input("image", workspace, "image")  # a folder is not a file


def test_resolve_input_with_a_null_byte_is_an_input_error(workspace):
    with pytest.raises(ToolInputError, match="does not exist"):
        files.resolve_input("image/a\x00.png", workspace, "image")


def test_expert_tools_refuse_image_bombs_and_non_image_formats(tmp_path):
    import pytest
    from PIL import Image

    from chatgpt_tool_hub.errors import ToolInputError
    from chatgpt_tool_hub.experts.base import open_image
    from chatgpt_tool_hub.runtime import filenames as files

    big = tmp_path / "bomb.png"
    side = int(files.MAX_INPUT_PIXELS ** 0.5) + 10
    Image.new("1", (side, side)).save(big)  # a small file with too many pixels
    with pytest.raises(ToolInputError):
        open_image(big)
    eps = tmp_path / "fake.png"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    with pytest.raises(ToolInputError):
        open_image(eps)
    ok = tmp_path / "ok.png"
    Image.new("RGB", (8, 4)).save(ok)
    assert open_image(ok).size == (8, 4)

"""Video files for expert tools: GIF through Pillow, MP4 through PyAV, bounded reading."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.runtime.video_io import read_frames, video_info, write_video

PIL = pytest.importorskip("PIL.Image")


def frames(count: int, size=(40, 30)):
    return [PIL.new("RGB", size, (i * 20 % 256, 10, 200)) for i in range(count)]


@pytest.mark.parametrize("ext", ["gif", "mp4"])
def test_written_videos_read_back_with_their_frames_sampled_evenly(tmp_path, ext):
    if ext == "mp4":
        pytest.importorskip("av")
    path = write_video(frames(10), tmp_path / f"clip.{ext}", fps=5)
    assert video_info(path) == {"frames": 10, "width": 40, "height": 30}
    sampled = read_frames(path, max_frames=4)
    assert len(sampled) == 4 and all(f.mode == "RGB" and f.size == (40, 30) for f in sampled)
    if ext == "gif":  # lossless: the first and last frames are the first and last written
        assert sampled[0].getpixel((0, 0))[0] == 0 and sampled[-1].getpixel((0, 0))[0] == 180


def test_float_frames_from_a_pipeline_are_written_too(tmp_path):
    import numpy as np

    path = write_video([np.full((8, 8, 3), 0.5, dtype=np.float32)] * 3, tmp_path / "f.gif")
    assert read_frames(path)[0].getpixel((0, 0)) == (128, 128, 128)


def test_files_that_are_not_videos_are_refused(tmp_path):
    (tmp_path / "x.gif").write_bytes(b"not a gif")
    with pytest.raises(ToolInputError, match="not a video"):
        read_frames(tmp_path / "x.gif")
    pytest.importorskip("av")
    (tmp_path / "y.mp4").write_bytes(b"\x00" * 100)
    with pytest.raises(ToolInputError, match="not a video"):
        read_frames(tmp_path / "y.mp4")

"""Bad inputs to the real commands (issue 29, items 5, 9 and 11): a truncated H.264 mp4
(moov atom first, cut at 30%) is reported by `embodied-r keyframes` and `video2bag`
(frames actually decoded, a `truncated` flag, a warning; `--strict` makes it an error);
a failed `video2bag` input leaves no `.video2bag.partial` behind; a Latin-1 question
file is one clear line from `replay-eval`, not a UnicodeDecodeError traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_r_ros.testing.keyframe_clips import clip_frames, make_texture, video_poses

av = pytest.importorskip("av")

FRAMES, FPS, WIDTH, HEIGHT = 200, 10, 160, 120


def embodied_r(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "embodied_r_ros.cli", *args], text=True,
                          capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("truncated")
    full = folder / "full.mp4"
    texture = make_texture(WIDTH * 4, HEIGHT * 2, seed=3)
    frames = clip_frames(texture, video_poses(FRAMES // FPS, FPS, WIDTH, HEIGHT * 2), WIDTH, HEIGHT)
    container = av.open(str(full), "w", options={"movflags": "faststart"})  # moov first
    stream = container.add_stream("libx264", rate=FPS)
    stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
    stream.options = {"bf": "3", "preset": "veryfast"}
    for frame in frames:
        picture = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p")
        for packet in stream.encode(picture):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)
    container.close()
    data = full.read_bytes()
    cut = folder / "cut.mp4"
    cut.write_bytes(data[: int(len(data) * 0.3)])
    return cut


def _clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


def test_keyframes_reports_a_truncated_video(truncated: Path) -> None:
    result = embodied_r("keyframes", str(truncated), "--json", "--no-progress")
    _clean(result)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["truncated"] is True, report
    assert report["n_source_frames"] == FRAMES
    assert report["frames_decoded"] < FRAMES * 0.6, report
    assert report["n_sampled"] < report["n_expected_samples"], report
    warnings = [line for line in result.stderr.splitlines() if "truncated" in line]
    assert len(warnings) == 1 and "warning" in warnings[0], result.stderr

    strict = embodied_r("keyframes", str(truncated), "--json", "--no-progress", "--strict")
    _clean(strict)
    assert strict.returncode == 2, strict.stderr
    assert "truncated" in strict.stderr and not strict.stdout.strip()


def test_video2bag_reports_a_truncated_video(truncated: Path, tmp_path: Path) -> None:
    out = tmp_path / "bags"
    result = embodied_r("video2bag", str(truncated), "--out", str(out))
    _clean(result)
    assert result.returncode == 0, result.stderr
    assert (out / "cut.mcap").exists()
    assert "truncated" in result.stderr and f"of the {FRAMES} frames" in result.stderr

    strict_out = tmp_path / "strict"
    strict = embodied_r("video2bag", str(truncated), "--out", str(strict_out), "--strict")
    _clean(strict)
    assert strict.returncode == 1, strict.stderr
    assert "truncated" in strict.stderr
    assert not (strict_out / "cut.mcap").exists()
    assert not (strict_out / ".video2bag.partial").exists()


def test_a_failed_video2bag_input_leaves_no_partial_folder(tmp_path: Path) -> None:
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"this is no video at all\n" * 100)
    out = tmp_path / "bags"
    result = embodied_r("video2bag", str(bad), "--out", str(out))
    _clean(result)
    assert result.returncode == 1, result.stderr
    assert "not_a_video" in result.stderr
    assert not (out / ".video2bag.partial").exists(), list(out.rglob("*"))


def test_replay_eval_with_a_latin1_question_file_is_one_line(tmp_path: Path) -> None:
    questions = tmp_path / "questions.json"
    questions.write_bytes(json.dumps([{"question": "Où est la porte ?", "answer": "A",
                                       "choices": ["gauche", "droite"]}],
                                      ensure_ascii=False).encode("latin-1"))
    result = embodied_r("replay-eval", "--bag", str(tmp_path), "--questions", str(questions),
                        "--mode", "fast")
    _clean(result)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "questions.json" in line]
    assert len(lines) == 1 and "not UTF-8" in lines[0] and "iconv" in lines[0], result.stderr

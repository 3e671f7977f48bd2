"""bench/bench_keyframe_costs.py: its frame kinds agree with FFmpeg's own picture types on
a real libx264 clip with B-frames, and a run on such a clip completes and reports that
skipping reference B-frames changes sampled frames while the NONREF plan does not."""

from __future__ import annotations

from pathlib import Path

import av
import pytest
from av.video.frame import PictureType

from bench.bench_keyframe_costs import PASSES, decode_pass, main, packet_kinds
from bench.bench_keyframes import write_clip
from embodied_r_ros.core.keyframes.rules import reference_sample_indices


@pytest.fixture(scope="module")
def h264_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 4 s at 30 fps: sampled frames 0, 30, 60, 90, 119; the bench clip's camera path
    # (holds, pans, turns), so x264 places P, reference B and plain B frames.
    path = tmp_path_factory.mktemp("costs") / "clip.mp4"
    return write_clip(path, 4 / 60, 320, 240, 30, "h264")


def test_frame_kinds_match_the_decoders_picture_types(h264_clip: Path) -> None:
    kinds, codec = packet_kinds(str(h264_clip))
    assert codec == "h264"
    with av.open(str(h264_clip)) as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.size]
    with av.open(str(h264_clip)) as container:
        decoded = {f.pts: PictureType(f.pict_type).name for f in container.decode(video=0)}
    assert len(kinds) == len(packets) == len(decoded) == 120
    expected = {"IDR": "I", "I": "I", "P": "P", "B reference": "B", "B non-reference": "B"}
    for kind, packet in zip(kinds, packets):
        assert expected[kind] == decoded[packet.pts], (kind, packet.pts)
    assert kinds[0] == "IDR"
    # The clip must exercise every case the bench separates.
    assert {"P", "B reference", "B non-reference"} <= set(kinds)


def test_nonref_skipping_keeps_sampled_frames_and_bidir_does_not(h264_clip: Path) -> None:
    kinds, _ = packet_kinds(str(h264_clip))
    sampled = set(reference_sample_indices(120, 30))
    runs = {name: decode_pass(str(h264_clip), skip, sampled, kinds)
            for name, skip in PASSES.items()}
    full = runs["all"]
    assert full["outputs"] == 120 and sorted(full["hashes"]) == sorted(sampled)
    assert runs["ours"]["hashes"] == full["hashes"]
    # The decoder drops exactly the non-reference B-frames that are not sampled.
    assert runs["ours"]["outputs"] == 120 - _unsampled_nonref(h264_clip, sampled) > 0
    assert runs["no-B"]["hashes"] != full["hashes"]
    assert sum(runs["ours"]["count_by_kind"].values()) == 120


def _unsampled_nonref(clip: Path, sampled: set[int]) -> int:
    """Frames that are B non-reference pictures and not sampled."""
    kinds, _ = packet_kinds(str(clip))
    with av.open(str(clip)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
    numbers = {pts: n for n, pts in enumerate(sorted(p.pts for p in packets))}
    return sum(1 for kind, p in zip(kinds, packets)
               if kind == "B non-reference" and numbers[p.pts] not in sampled)


def test_bench_runs_on_a_given_clip(h264_clip: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--clip", str(h264_clip), "--orb-frames", "2"]) == 0
    out = capsys.readouterr().out
    assert "floor of ours on" in out
    assert "no-B" in out and "B reference" in out


def test_bench_refuses_a_missing_clip(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["--clip", str(tmp_path / "nope.mp4")])

"""Benchmark: where whole-clip key-frame CPU time goes on H.264, and what cannot be skipped.

`bench_keyframes` compares wall times; this one explains the floor under ours. On one
clip, same run, it decodes the file three times with one single-threaded PyAV decoder on
the calling thread and counts the CPU seconds of that thread per decode call:

- all    every frame is decoded (what `cap.read()` of every frame must do);
- ours   a frame that is not sampled is sent with ``skip_frame = NONREF``, so the decoder
         drops it when no other frame refers to it (H.264 nal_ref_idc 0). This is what
         `extract_keyframes_from_video` does, except that its plan also leaves out the
         packets after the last sampled frame of each closed segment (a few per segment);
- no-B   a frame that is not sampled is sent with ``skip_frame = BIDIR``: B-frames are
         dropped even when they are references. It saves more, but the bench counts how
         many sampled frames then differ (Y, U and V planes) from the full decode: with
         x264's default b-pyramid, later P-frames predict from reference B-frames, so
         leaving those out changes the sampled pixels and the key frames.

For the "ours" pass the CPU time is split by kind of frame (from the first slice header
of each packet): IDR, other I, P, reference B, B that nothing refers to. Then ORB
(OpenCV defaults, as the reference) runs on the first `--orb-frames` sampled frames, and
the bench prints the CPU floor of ours: (decoding + ORB for every sampled frame) / CPUs,
which no scheduling can beat while the output must stay identical.

    python -m bench.bench_keyframe_costs --clips /tmp/clips          # the 10-minute H.264 clip
    python -m bench.bench_keyframe_costs --clip my_video.mp4         # any H.264 file

The default clip is bench_keyframes' (`--minutes 10`, 1280x720, libx264 with 3 B-frames),
written into `--clips` when it is not there yet (about 5 minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from embodied_r_ros.core.video.frames import nal_length_size, nal_unit_spans  # noqa: E402

if TYPE_CHECKING:
    import av

KINDS = ("IDR", "I", "P", "B reference", "B non-reference", "other")
# The values PyAV takes for a decoder's skip_frame.
SkipFrame = Literal["NONE", "DEFAULT", "NONREF", "BIDIR", "NONINTRA", "NONKEY", "ALL"]
PASSES: dict[str, SkipFrame] = {"all": "DEFAULT", "ours": "NONREF", "no-B": "BIDIR"}


class _Bits:
    """Exp-Golomb reader over a NAL payload (emulation-prevention bytes removed)."""

    def __init__(self, payload: bytes) -> None:
        self.data = payload.replace(b"\x00\x00\x03", b"\x00\x00")
        self.pos = 0

    def bit(self) -> int:
        byte = self.data[self.pos >> 3]
        value = (byte >> (7 - (self.pos & 7))) & 1
        self.pos += 1
        return value

    def ue(self) -> int:
        zeros = 0
        while self.bit() == 0:
            zeros += 1
        value = 0
        for _ in range(zeros):
            value = (value << 1) | self.bit()
        return (1 << zeros) - 1 + value


def frame_kind(data: bytes, length_size: int | None) -> str:
    """Kind of the H.264 picture in a packet, from its first slice NAL unit."""
    for start, end in nal_unit_spans(data, length_size) or []:
        nal = data[start:end]
        if not nal:
            continue
        nal_type, ref_idc = nal[0] & 0x1F, (nal[0] >> 5) & 3
        if nal_type not in (1, 5):
            continue
        if nal_type == 5:
            return "IDR"
        try:
            bits = _Bits(nal[1:16])
            bits.ue()  # first_mb_in_slice
            slice_type = bits.ue() % 5
        except IndexError:
            return "other"
        if slice_type == 2:
            return "I"
        if slice_type == 0:
            return "P"
        if slice_type == 1:
            return "B reference" if ref_idc else "B non-reference"
        return "other"
    return "other"


def _pts(packet: av.Packet) -> int:
    """A demuxed packet's presentation stamp (each one with data has one)."""
    if packet.pts is None:
        raise ValueError(f"a packet without a presentation stamp: {packet}")
    return int(packet.pts)


def decode_pass(path: str, skip: SkipFrame, sampled: set[int], kinds: list[str] | None
                ) -> dict[str, Any]:
    """One single-threaded decode of `path`; frames not in `sampled` (presentation
    numbers) are sent with skip_frame = `skip`. Returns the decoding thread's CPU seconds
    (in all and per kind when `kinds` gives each packet's kind), frames output, and a
    hash of each sampled frame's planes."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.size]
        order = sorted(range(len(packets)), key=lambda k: _pts(packets[k]))
        number_of_pts = {packets[k].pts: n for n, k in enumerate(order)}
        ctx = stream.codec_context
        ctx.thread_count = 1
        cpu_by_kind: dict[str, float] = defaultdict(float)
        count_by_kind: dict[str, int] = defaultdict(int)
        hashes: dict[int, str] = {}
        outputs = 0

        def take(frames: list) -> None:
            nonlocal outputs
            for frame in frames:
                outputs += 1
                number = number_of_pts[frame.pts]
                if number in sampled:
                    hashes[number] = hashlib.blake2b(frame.to_ndarray().tobytes(),
                                                     digest_size=16).hexdigest()

        total = 0.0
        for k, packet in enumerate(packets):
            ctx.skip_frame = "DEFAULT" if number_of_pts[packet.pts] in sampled else skip
            t0 = time.thread_time()
            frames = ctx.decode(packet)
            spent = time.thread_time() - t0
            total += spent
            if kinds is not None:
                cpu_by_kind[kinds[k]] += spent
                count_by_kind[kinds[k]] += 1
            take(frames)
        t0 = time.thread_time()
        frames = ctx.decode(None)
        total += time.thread_time() - t0
        take(frames)
    return {"cpu_s": total, "outputs": outputs, "hashes": hashes,
            "cpu_by_kind": dict(cpu_by_kind), "count_by_kind": dict(count_by_kind)}


def packet_kinds(path: str) -> tuple[list[str], str]:
    """Kind of each packet in decoding order, and the codec name."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        codec = stream.codec_context.name
        length_size = nal_length_size(codec, stream.codec_context.extradata)
        kinds = [frame_kind(bytes(p), length_size) for p in container.demux(stream) if p.size]
    return kinds, codec


def orb_costs(path: str, numbers: list[int]) -> tuple[float, float]:
    """Thread CPU ms per frame of grey conversion + ORB (OpenCV defaults) on the given
    frames, and their mean keypoint count."""
    import av
    import cv2

    wanted = set(numbers)
    images = []
    with av.open(path) as container:  # decoder output order = presentation order
        stream = container.streams.video[0]
        for n, frame in enumerate(container.decode(stream)):
            if n in wanted:
                images.append(frame.to_ndarray(format="bgr24"))
            if len(images) == len(numbers):
                break
    orb = cv2.ORB.create()
    t0 = time.thread_time()
    found = [len(orb.detectAndCompute(cv2.cvtColor(im, cv2.COLOR_BGR2GRAY), None)[0])
             for im in images]
    spent = time.thread_time() - t0
    return 1000 * spent / max(1, len(images)), sum(found) / max(1, len(found))


def run(path: str, orb_frames: int) -> int:
    from embodied_r_ros.core.keyframes.rules import (
        KeyFrameParams,
        reference_sample_indices,
        sampling_step,
    )
    from embodied_r_ros.core.video.frames import probe_video

    info = probe_video(path)
    sampled_list = reference_sample_indices(
        info.frame_count, sampling_step(info.fps, KeyFrameParams().sample_fps))
    sampled = set(sampled_list)
    kinds, codec = packet_kinds(path)
    if codec != "h264":
        print(f"{path}: codec {codec}; this bench reads H.264 slice headers only")
        return 2
    print(f"clip: {path} ({len(kinds)} frames, {info.width}x{info.height} @ {info.fps:g} fps, "
          f"{len(sampled)} sampled)")
    print("kinds of frame: " + ", ".join(f"{k} {kinds.count(k)}" for k in KINDS if k in kinds))
    results = {}
    for name, skip in PASSES.items():
        results[name] = decode_pass(path, skip, sampled, kinds if name == "ours" else None)
    full = results["all"]
    print(f"\n{'pass':<6} {'skip_frame':<10} {'frames out':>10} {'decode CPU s':>13} "
          f"{'vs all':>7}  sampled frames equal to the full decode")
    for name, skip in PASSES.items():
        r = results[name]
        equal = sum(1 for n, h in r["hashes"].items() if full["hashes"].get(n) == h)
        print(f"{name:<6} {skip:<10} {r['outputs']:>10} {r['cpu_s']:>13.2f} "
              f"{r['cpu_s'] / full['cpu_s']:>6.2f}x  {equal}/{len(full['hashes'])}")
    ours = results["ours"]
    print(f"\n{'kind (ours pass)':<17} {'packets':>8} {'CPU s':>7} {'ms each':>8}")
    for kind in KINDS:
        count = ours["count_by_kind"].get(kind, 0)
        if count:
            spent = ours["cpu_by_kind"][kind]
            print(f"{kind:<17} {count:>8} {spent:>7.2f} {1000 * spent / count:>8.3f}")
    orb_ms, keypoints = orb_costs(path, sampled_list[:orb_frames])
    orb_s = orb_ms * len(sampled) / 1000
    cpus = len(os.sched_getaffinity(0))
    print(f"\nORB (grey + detectAndCompute, OpenCV defaults): {orb_ms:.1f} ms CPU a frame over "
          f"the first {min(orb_frames, len(sampled))} sampled frames ({keypoints:.0f} "
          f"keypoints each); {len(sampled)} sampled frames: {orb_s:.1f} s")
    print(f"floor of ours on {cpus} CPU(s): (decode {ours['cpu_s']:.1f} s + ORB {orb_s:.1f} s) "
          f"/ {cpus} = {(ours['cpu_s'] + orb_s) / cpus:.1f} s wall, before matching and "
          "decisions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", type=Path, default=None,
                        help="an H.264 file to analyse (default: bench_keyframes' clip)")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="length of the default clip (default 10)")
    parser.add_argument("--clips", type=Path, default=None,
                        help="folder holding / receiving the default clip (default: temporary)")
    parser.add_argument("--orb-frames", type=int, default=60,
                        help="sampled frames ORB is timed on (default 60)")
    args = parser.parse_args(argv)
    if args.orb_frames < 1:
        parser.error("--orb-frames must be at least 1")
    if args.clip is not None:
        if not args.clip.is_file():
            parser.error(f"--clip {args.clip}: no such file")
        return run(str(args.clip), args.orb_frames)
    from bench.bench_keyframes import ensure_clip

    folder = args.clips or Path(tempfile.mkdtemp(prefix="bench_keyframe_costs_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"clip folder {folder} (an existing bench_keyframes clip is reused)", flush=True)
    video, _ = ensure_clip(folder, args.minutes, 1280, 720, 30, "h264")
    try:
        return run(str(video), args.orb_frames)
    finally:
        if args.clips is None:
            video.unlink()
            folder.rmdir()


if __name__ == "__main__":
    sys.exit(main())

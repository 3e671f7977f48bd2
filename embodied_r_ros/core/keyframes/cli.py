"""`embodied-r keyframes VIDEO`: print the key frames chosen from a video file.

Prints the final key frames as positions among the sampled frames (`sampled_indices`) and
as frame numbers of the video (`source_frames`); with the default settings both equal the
reference method's (docs/method.md §2). Also prints the time taken, split into decoding and
selection, and the decoding strategy used.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from embodied_r_ros.core.errors import EmbodiedRError
from embodied_r_ros.core.keyframes.extraction import extract_keyframes_from_video
from embodied_r_ros.core.keyframes.rules import KeyFrameParams

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    defaults = KeyFrameParams()
    parser = argparse.ArgumentParser(
        prog="embodied-r keyframes",
        description="Select key frames from a video file with the Embodied-R method.",
    )
    parser.add_argument("video", help="path of a video file OpenCV can read")
    parser.add_argument(
        "--threshold",
        type=float,
        default=defaults.overlap_threshold,
        help="keep a frame when its overlap with the last key frame is below this "
        f"(default {defaults.overlap_threshold})",
    )
    parser.add_argument("--min", dest="min_keyframes", type=int, default=defaults.min_keyframes,
                        help=f"fewest key frames (default {defaults.min_keyframes})")
    parser.add_argument("--max", dest="max_keyframes", type=int, default=defaults.max_keyframes,
                        help=f"most key frames (default {defaults.max_keyframes})")
    parser.add_argument("--fps", type=float, default=defaults.sample_fps,
                        help="frames examined per second of video: every int(video_fps / FPS)-th "
                        f"frame plus the last (default {defaults.sample_fps:g}, the reference's "
                        "int(video_fps) step; 0 = every frame)")
    parser.add_argument("--decoder", default="auto",
                        choices=["auto", "pyav", "intra", "sequential"],
                        help="how to decode: auto (PyAV, then OpenCV's raw Motion-JPEG packets, "
                        "then plain OpenCV), or one of them first with plain OpenCV behind it; "
                        "every choice gives the same key frames (default auto)")
    parser.add_argument("--workers", type=int, default=None,
                        help="threads for ORB features (default: all usable CPUs)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--strict", action="store_true",
                        help="fail (exit 2) when the video ends before the frames its header "
                        "announces (a truncated file) instead of warning")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (it is shown on stderr only when stderr is a "
                        "terminal)")
    return parser


class _ProgressBar:
    """A bar over the sampled frames on stderr, created once the total is known.
    `disable`: True (never shown) or None (shown only when stderr is a terminal)."""

    def __init__(self, label: str, disable: bool | None) -> None:
        self.label, self.disable = label, disable
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.label, unit="frame", disable=self.disable,
                            file=sys.stderr)
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)  # throttled by tqdm
        else:  # a decoder hand-over starts again from 1
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main(argv: list[str]) -> int:
    """Run the command; returns 0 on success, 2 on bad arguments or an unreadable video."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage / error
        return int(exc.code or 0)
    try:
        params = KeyFrameParams(
            sample_fps=args.fps,
            overlap_threshold=args.threshold,
            min_keyframes=args.min_keyframes,
            max_keyframes=args.max_keyframes,
        )
        progress = _ProgressBar("sampled frames", True if args.no_progress else None)
        try:
            result = extract_keyframes_from_video(args.video, params, decoder=args.decoder,
                                                  workers=args.workers, on_progress=progress)
        finally:
            progress.close()
    except EmbodiedRError as exc:
        print(f"embodied-r keyframes: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    note = result.truncation_note()
    if note and args.strict:
        print(f"embodied-r keyframes: error: {args.video}: {note} (--strict)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if note:
        print(f"embodied-r keyframes: warning: {args.video}: {note}; --strict makes this an "
              "error", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "video": args.video,
            "sampled_indices": result.sampled_indices,
            "source_frames": result.source_frames,
            "n_sampled": result.n_sampled,
            "n_source_frames": result.n_source_frames,
            "n_expected_samples": result.n_expected_samples,
            "frames_decoded": result.frames_decoded,
            "truncated": result.truncated,
            "video_fps": result.video_fps,
            "selected_positions": result.selected_positions,
            "seconds": round(result.seconds, 4),
            "decode_seconds": round(result.decode_seconds, 4),
            "select_seconds": round(result.select_seconds, 4),
            "decode_strategy": result.decode_strategy,
            "packets_read": result.packets_read,
            "packets_decoded": result.packets_decoded,
            "fallbacks": result.fallbacks,
        }))
        return EXIT_OK
    print(f"video: {args.video} ({result.n_source_frames} frames at {result.video_fps:g} fps, "
          f"{result.n_sampled} sampled at {params.sample_fps:g} fps)")
    print(f"key frames ({len(result.sampled_indices)}):")
    print(f"  sampled positions: {' '.join(map(str, result.sampled_indices))}")
    print(f"  source frames:     {' '.join(map(str, result.source_frames))}")
    print(f"time: {result.seconds:.3f} s (CPU: decoding {result.decode_seconds:.3f} s, selection "
          f"{result.select_seconds:.3f} s; {result.decode_strategy} decoding, "
          f"{result.packets_decoded} of {result.packets_read} packets decoded)")
    for note in result.fallbacks:
        print(f"  not used: {note}")
    return EXIT_OK

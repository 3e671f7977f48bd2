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
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object, with every sampled frame's overlap and "
                        "the reason it was kept or not (`frames`) and the final key frames "
                        "(`keyframes`)")
    parser.add_argument("--sheet", metavar="FILE.png", default=None,
                        help="also write a contact sheet: one PNG of the chosen key frames, "
                        "each labelled with its index, frame number, time and overlap")
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
                                                  workers=args.workers, on_progress=progress,
                                                  return_images=bool(args.sheet))
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
    frames, keyframes = per_frame(result)
    if args.sheet:
        write_sheet(args.sheet, result, keyframes)
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
            "keyframes": keyframes,
            "frames": frames,
            "sheet": args.sheet or "",
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
    print("  index  frame   time s  overlap  why")
    for k in keyframes:
        overlap = "-" if k["overlap"] is None else f"{k['overlap']:.2f}"
        print(f"  {k['index']:5d}  {k['source_frame']:5d}  {k['time_s']:7.2f}  {overlap:>7}  "
              f"{k['reason']}")
    if args.sheet:
        print(f"contact sheet: {args.sheet}")
    return EXIT_OK


def per_frame(result: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(every sampled frame: position, frame number, time, overlap, reason, kept by the
    selector, final key frame; the final key frames with their index). An overlap of None
    means none was measured (the first frame, no features, too few matches)."""
    fps = result.video_fps or 0.0
    final = set(result.sampled_indices)
    selected = set(result.selected_positions)
    frames = []
    for position, number in enumerate(result.sampled_frames):
        overlap, reason = (result.decisions[position] if position < len(result.decisions)
                           else (-1.0, ""))
        frames.append({"position": position, "source_frame": number,
                       "time_s": round(number / fps, 3) if fps else None,
                       "overlap": None if overlap < 0 else round(overlap, 4), "reason": reason,
                       "selected": position in selected, "key_frame": position in final})
    keyframes = []
    for index, position in enumerate(result.sampled_indices):
        row = dict(frames[position]) if position < len(frames) else {"position": position}
        if position not in selected:
            row["reason"] = "count_rule"  # picked by the min/max count rule, not by overlap
        elif position == len(frames) - 1 and row.get("reason") == "high_overlap":
            row["reason"] = "last_frame"  # the clip's last frame is always kept
        keyframes.append({"index": index, **row})
    return frames, keyframes


def write_sheet(path: str, result: Any, keyframes: list[dict[str, Any]],
                tile_width: int = 320, columns: int = 4) -> None:
    """One PNG of the key frames, each labelled "#index  frame N  t=..s  overlap .."."""
    import cv2
    import numpy as np

    tiles = []
    for k, image in zip(keyframes, result.images):
        h, w = image.shape[:2]
        tile = cv2.resize(image, (tile_width, max(1, round(h * tile_width / w))))
        bar = np.full((22, tile_width, 3), 255, np.uint8)
        overlap = "-" if k.get("overlap") is None else f"{k['overlap']:.2f}"
        time_s = "" if k.get("time_s") is None else f"  t={k['time_s']:.1f}s"
        cv2.putText(bar, f"#{k['index']} frame {k['source_frame']}{time_s} ov {overlap}",
                    (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        tiles.append(np.vstack([bar, tile]))
    if not tiles:
        return
    height = max(t.shape[0] for t in tiles)
    tiles = [np.vstack([t, np.full((height - t.shape[0], tile_width, 3), 255, np.uint8)])
             for t in tiles]
    while len(tiles) % columns:
        tiles.append(np.full_like(tiles[0], 255))
    rows = [np.hstack(tiles[i:i + columns]) for i in range(0, len(tiles), columns)]
    sheet = np.vstack(rows)
    if not cv2.imwrite(str(path), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR)):
        raise EmbodiedRError(f"cannot write the contact sheet {path}")

"""`embodied-r video2bag`: benchmark videos (mp4 ...) into rosbag2 camera recordings.

    embodied-r video2bag data/UrbanVideo-Bench/videos/*.mp4 --out bags/ --compressed
    embodied-r replay-eval --bag bags/ --questions data/prepared/test.jsonl --mode fast ...

Each VIDEO becomes one bag folder ``<out>/<video stem>.mcap`` (``.db3`` with
``--storage sqlite3``), so the benchmarks' own ``video_id`` / ``video_path`` fields find
it in `replay-eval`'s folder mode. Frames are decoded with OpenCV, as the offline
key-frame path decodes them (docs/method.md §2), and written in order on ``--topic`` as
sensor_msgs/Image (``rgb8``, the decoded pixels exactly) or, with ``--compressed``,
sensor_msgs/CompressedImage (JPEG, ``--jpeg-quality``, on ``<topic>/compressed``; about
10x smaller). Header stamp and record time of a frame are ``--start-time`` plus the
frame's presentation time in the video (from the container; frame number / fps when the
container gives none), so sampling by stamps sees the clip's real timing.
``--start-time`` defaults to 1 s because ROS treats a zero stamp as "not set".

``--fps-limit F`` keeps at most F frames per second of video time, picked by the same
stamp sampler the robot uses (`core.keyframes.FrameRateSampler`): with F a whole multiple
of ``keyframes.sample_fps`` (1 Hz) the robot samples exactly the frames it would sample
from the full clip, from a bag F/fps the size.

A bag is written in ``<out>/.video2bag.partial/`` and moved into place when complete: an interrupted
conversion leaves no bag that looks finished, and running the same command again skips
the videos already converted (``--force`` converts them again). A conversion that fails
removes what it had written (no ``.video2bag.partial`` is left behind).

A video that ends before the frames its header announces (a truncated file) is converted
as far as it decodes, with a warning giving the frames read and announced; ``--strict``
makes it an error (no bag is written).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from embodied_r_ros.core.errors import EmbodiedRError, InvalidRequestError

SUFFIX = {"mcap": ".mcap", "sqlite3": ".db3"}
PARTIAL_DIR = ".video2bag.partial"  # bags being written; hidden from replay-eval


@dataclass
class ConvertedVideo:
    video: str
    bag: str
    frames_read: int = 0
    frames_written: int = 0
    duration_s: float = 0.0
    size: tuple[int, int] = (0, 0)  # width, height of the first frame
    seconds: float = 0.0
    skipped: bool = False  # the bag existed already
    frames_announced: int = 0  # the container's frame count (0 = unknown)

    @property
    def truncated(self) -> bool:
        """Fewer frames decoded than announced (more than one missing: counts in some
        containers are estimates)."""
        return self.frames_announced > 0 and self.frames_read < self.frames_announced - 1

    def truncation_note(self) -> str:
        if not self.truncated:
            return ""
        return (f"the video ends early: {self.frames_read} of the {self.frames_announced} "
                "frames its header announces could be decoded (probably a truncated file)")


def announced_frames(path: str | Path) -> int:
    """The container's frame count (0 when it gives none)."""
    cap = cv2.VideoCapture(str(path))
    try:
        count = float(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0.0) if cap.isOpened() else 0.0
    finally:
        cap.release()
    return int(count) if np.isfinite(count) and count > 0 else 0


def video_frames(path: str | Path) -> Iterator[tuple[float, np.ndarray]]:
    """(presentation time in seconds, RGB frame) for every frame of a video, in order.

    Times come from the decoder (CAP_PROP_POS_MSEC); where the container gives none, or
    a time does not increase, frame number / fps is used instead."""
    path = Path(path)
    if not path.is_file():
        raise InvalidRequestError(f"video {path} does not exist")
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise InvalidRequestError(f"cannot open video {path} (unreadable or unsupported format)")
    try:
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        index, last = 0, -1.0
        while True:
            ok, bgr = cap.read()
            if not ok:
                break
            t = float(cap.get(cv2.CAP_PROP_POS_MSEC)) / 1000.0
            if not t > last:
                if fps <= 0:
                    raise InvalidRequestError(
                        f"video {path} gives neither frame times nor a frame rate; re-encode it "
                        "(e.g. ffmpeg -i in -c:v libx264 out.mp4)")
                t = index / fps
                if not t > last:
                    t = last + 1.0 / fps
            last = t
            index += 1
            yield t, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        if index == 0:
            raise InvalidRequestError(f"video {path} has no decodable frame")
    finally:
        cap.release()


def convert(video: str | Path, bag: str | Path, *, storage: str = "mcap",
            compressed: bool = False, topic: str = "/camera/image_raw",
            frame_id: str = "camera", jpeg_quality: int = 95, fps_limit: float = 0.0,
            start_time_s: float = 1.0, strict: bool = False) -> ConvertedVideo:
    """Write one video as a bag at `bag` (module docstring); the bag must not exist.
    `strict`: a truncated video is an InvalidRequestError instead of a warning."""
    from embodied_r_ros.core.keyframes.rules import FrameRateSampler
    from embodied_r_ros.sample_data.bag_io import ImageBagWriter

    if fps_limit < 0:
        raise InvalidRequestError(f"--fps-limit must be >= 0, got {fps_limit}")
    if not start_time_s > 0:
        raise InvalidRequestError(f"--start-time must be > 0 (a zero stamp means 'not set'), "
                                  f"got {start_time_s}")
    bag = Path(bag)
    partial = bag.parent / PARTIAL_DIR / bag.name
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    out = ConvertedVideo(str(video), str(bag))
    sampler = FrameRateSampler(fps_limit)
    try:
        with ImageBagWriter(partial, topic=topic, frame_id=frame_id, storage=storage,
                            compressed=compressed, jpeg_quality=jpeg_quality) as writer:
            for t, rgb in video_frames(video):
                out.frames_read += 1
                if out.frames_read == 1:
                    out.size = (int(rgb.shape[1]), int(rgb.shape[0]))
                out.duration_s = t
                if not sampler.accept(t):
                    continue
                writer.write(rgb, start_time_s + t)
                out.frames_written += 1
        out.frames_announced = announced_frames(video)
        if strict and out.truncated:
            raise InvalidRequestError(f"{video}: {out.truncation_note()} (--strict)")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        try:
            partial.parent.rmdir()
        except OSError:
            pass  # another conversion is still writing there, or it never existed
        raise
    partial.rename(bag)
    try:
        partial.parent.rmdir()
    except OSError:
        pass  # another conversion is still writing there
    out.seconds = time.monotonic() - started
    return out


def bag_path_for(video: str | Path, out: str | Path, storage: str) -> Path:
    return Path(out) / (Path(video).stem + SUFFIX[storage])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied-r video2bag",
                                description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring (embodied_r_ros.video2bag).")
    p.add_argument("videos", nargs="+", type=Path, metavar="VIDEO", help="video files")
    p.add_argument("--out", type=Path, required=True, help="folder for the bags")
    p.add_argument("--storage", choices=tuple(SUFFIX), default="mcap",
                   help="rosbag2 storage (default mcap)")
    p.add_argument("--compressed", action="store_true",
                   help="JPEG sensor_msgs/CompressedImage on <topic>/compressed instead of raw rgb8")
    p.add_argument("--topic", default="/camera/image_raw", help="image topic (default /camera/image_raw)")
    p.add_argument("--frame-id", default="camera", help="header frame_id (default camera)")
    p.add_argument("--jpeg-quality", type=int, default=95,
                   help="JPEG quality with --compressed (default 95, OpenCV's default)")
    p.add_argument("--fps-limit", type=float, default=0.0,
                   help="keep at most this many frames per second of video (0 = all; use a "
                        "multiple of keyframes.sample_fps to keep the frames the robot samples)")
    p.add_argument("--start-time", type=float, default=1.0,
                   help="stamp of the video's time 0, in seconds (default 1.0; must be > 0)")
    p.add_argument("--force", action="store_true", help="convert again videos whose bag exists")
    p.add_argument("--strict", action="store_true",
                   help="a video that ends before the frames its header announces (truncated) "
                        "is an error, not a warning")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    targets = [bag_path_for(v, args.out, args.storage) for v in args.videos]
    seen: dict[Path, Path] = {}
    for video, bag in zip(args.videos, targets):
        if bag in seen:
            print(f"video2bag: {video} and {seen[bag]} would both become {bag}; convert them "
                  "into separate --out folders", file=sys.stderr)
            return 2
        seen[bag] = video
    failed = 0
    for n, (video, bag) in enumerate(zip(args.videos, targets), 1):
        if bag.exists() and not args.force:
            print(f"[{n}/{len(targets)}] {bag} exists, skipped (--force converts again)")
            continue
        try:
            if bag.exists():
                shutil.rmtree(bag)
            done = convert(video, bag, storage=args.storage, compressed=args.compressed,
                           topic=args.topic, frame_id=args.frame_id,
                           jpeg_quality=args.jpeg_quality, fps_limit=args.fps_limit,
                           start_time_s=args.start_time, strict=args.strict)
        except EmbodiedRError as exc:
            failed += 1
            print(f"[{n}/{len(targets)}] video2bag: {exc}", file=sys.stderr)
            continue
        if done.truncated:
            print(f"[{n}/{len(targets)}] video2bag: warning: {video}: "
                  f"{done.truncation_note()}; --strict makes this an error", file=sys.stderr)
        size_mb = sum(f.stat().st_size for f in bag.iterdir()) / 1e6
        print(f"[{n}/{len(targets)}] {video} -> {bag}: {done.frames_written} of {done.frames_read} "
              f"frames ({done.size[0]}x{done.size[1]}, {done.duration_s:.1f} s), {size_mb:.1f} MB "
              f"in {done.seconds:.1f}s")
    if failed:
        print(f"video2bag: {failed} of {len(targets)} videos failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

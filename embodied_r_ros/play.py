"""`embodied-r play`: publish a rosbag's or a video's frames onto the camera topic of a
running graph, as a camera driver (or `ros2 bag play`, which is not installed here) would.

    embodied-r play artifacts/sample/sample.mcap            # a rosbag2 file or folder
    embodied-r play my_walk.mp4 --rate 2 --loop             # a video file
    embodied-r play run.mcap --topic /front/image_raw --qos reliable

Frames go out as sensor_msgs/Image (rgb8) with their recorded header stamps (a video's
frames: --start-time plus the frame's time in the video), paced by the recorded time
divided by --rate (0: as fast as possible). Bags are read as `replay-eval` reads them
(compressed images are decoded; zero stamps and out-of-order frames are handled the
same way). With --loop the recording starts again after its end, its stamps shifted on
so that time keeps going forward. A progress line shows frames and stream time.

QoS: `robot` (default) is what camera drivers offer (best effort, sensor-data QoS): a
graph that falls behind loses frames, as on the robot. `reliable` keeps up to 200
unread frames for a slow subscriber; it only makes a difference to a subscription that
is reliable too (`camera.reliability: reliable`).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg"}
DEFAULT_TOPIC = "/camera/image_raw"  # the camera.topic default (config/embodied_r.yaml)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embodied-r play", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="rosbag2 file or folder, or a video file")
    parser.add_argument("--rate", type=float, default=1.0,
                        help="speed factor over recorded time (default 1; 0 = as fast as "
                             "possible)")
    parser.add_argument("--loop", action="store_true", help="start again after the end "
                        "(until Ctrl-C)")
    parser.add_argument("--topic", default=DEFAULT_TOPIC,
                        help=f"camera topic to publish on (default {DEFAULT_TOPIC}, the "
                             "graph's camera.topic default)")
    parser.add_argument("--qos", choices=["robot", "reliable"], default="robot",
                        help="robot: best effort, as camera drivers publish (default); "
                             "reliable: keeps unread frames for a reliable subscriber")
    parser.add_argument("--bag-topic", default=None,
                        help="image topic to read from a bag with several (default: the "
                             "only one)")
    parser.add_argument("--start-time", type=float, default=1.0,
                        help="header stamp of a video's first frame, seconds (default 1)")
    parser.add_argument("--wait", type=float, default=10.0,
                        help="seconds to wait for a subscriber before publishing anyway "
                             "(default 10)")
    return parser.parse_args(argv)


def is_video(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES


def frames(source: Path, bag_topic: str | None, start_time_s: float
           ) -> tuple[Iterator[tuple[float, Any, str]], int | None]:
    """(stamp_s, rgb image, frame_id) of every frame, and how many there are (when known)."""
    if is_video(source):
        import cv2

        from embodied_r_ros.video2bag import video_frames

        cap = cv2.VideoCapture(str(source))
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0) or None
        cap.release()
        return ((start_time_s + t, image, "camera") for t, image in video_frames(source)), total
    from embodied_r_ros.sample_data.bag_io import iter_bag_frames

    return ((f.stamp_s, f.image(), f.frame_id or "camera")
            for f in iter_bag_frames(source, bag_topic)), _bag_frame_count(source)


def _bag_frame_count(source: Path) -> int | None:
    from embodied_r_ros.sample_data.bag_io import IMAGE_TYPES, _open_reader

    try:
        reader = _open_reader(source)
    except Exception:  # noqa: BLE001 - the frame reader reports the error properly
        return None
    try:
        counts = [getattr(c, "msgcount", 0) for c in reader.connections
                  if c.msgtype in IMAGE_TYPES]
    finally:
        reader.close()
    return counts[0] if len(counts) == 1 and counts[0] else None


class Progress:
    """One progress line on stderr: redrawn in place on a terminal, every 10 % otherwise."""

    def __init__(self, total: int | None, label: str) -> None:
        self.total, self.label = total, label
        self.tty = sys.stderr.isatty()
        self.last_decile = -1
        self.start = time.monotonic()

    def update(self, played: int, stream_s: float, subscribers: int, lap: int) -> None:
        of = f"/{self.total}" if self.total else ""
        pct = f" ({100 * played / self.total:3.0f}%)" if self.total else ""
        loop = f", loop {lap + 1}" if lap else ""
        line = (f"{self.label}: {played}{of} frames{pct}, {stream_s:6.1f} s of stream time "
                f"in {time.monotonic() - self.start:6.1f} s, {subscribers} subscriber(s){loop}")
        if self.tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
            return
        decile = int(10 * played / self.total) if self.total else played // 100
        if decile != self.last_decile:
            self.last_decile = decile
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    from embodied_r_ros.core.errors import EmbodiedRError

    if not args.source.exists():
        print(f"embodied-r play: {args.source} does not exist", file=sys.stderr)
        return 2
    try:
        first_pass, total = frames(args.source, args.bag_topic, args.start_time)
        return _publish(args, first_pass, total)
    except EmbodiedRError as exc:
        print(f"embodied-r play: {exc}", file=sys.stderr)
        return 1


def _publish(args: argparse.Namespace, first_pass: Iterator[tuple[float, Any, str]],
             total: int | None) -> int:
    import rclpy
    from std_msgs.msg import Header

    from embodied_r_ros.nodes.common.conversions import rgb_to_image_msg, seconds_to_stamp
    from embodied_r_ros.replay import camera_publisher_qos

    rclpy.init(args=["--ros-args"])
    node = rclpy.create_node("embodied_r_play")
    qos = camera_publisher_qos("best_effort" if args.qos == "robot" else "reliable")
    pub = node.create_publisher(_image_type(), args.topic, qos)
    played = 0
    try:
        deadline = time.monotonic() + max(0.0, args.wait)
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if pub.get_subscription_count() == 0:
            print(f"embodied-r play: nobody subscribes to {args.topic} yet (is the graph "
                  "running? `embodied-r launch ...` in another shell); publishing anyway",
                  file=sys.stderr)
        progress = Progress(total, f"playing {args.source.name} on {args.topic}")
        offset, end_stamp = 0.0, None
        wall0: float | None = None
        stamp0 = 0.0
        for lap in itertools.count():
            source = first_pass if lap == 0 else frames(args.source, args.bag_topic,
                                                        args.start_time)[0]
            lap_first: float | None = None
            for stamp_s, image, frame_id in source:
                if lap_first is None:
                    lap_first = stamp_s
                    if end_stamp is not None:  # keep time going forward across laps
                        offset = end_stamp + 1.0 - stamp_s
                stamp = stamp_s + offset
                if wall0 is None:
                    wall0, stamp0 = time.monotonic(), stamp
                elif args.rate > 0:
                    delay = (stamp - stamp0) / args.rate - (time.monotonic() - wall0)
                    if delay > 0:
                        time.sleep(delay)
                header = Header(stamp=seconds_to_stamp(stamp), frame_id=frame_id)
                pub.publish(rgb_to_image_msg(image, header))
                played += 1
                end_stamp = stamp
                progress.update(played, stamp - stamp0, pub.get_subscription_count(), lap)
            if not args.loop or lap_first is None:
                break
        progress.done()
        _drain(pub, reliable=args.qos != "robot")
    except KeyboardInterrupt:
        print(file=sys.stderr)
    except Exception:
        if rclpy.ok():
            raise
        print(file=sys.stderr)  # Ctrl-C reached rclpy's handler first: the context is shut down
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    print(f"embodied-r play: published {played} frames of {args.source} on {args.topic} "
          f"({args.qos} QoS). Next: `embodied-r ask \"What did I see first?\"` "
          "(`embodied-r status` shows how many frames the graph received).")
    return 0 if played else 1


def _drain(pub: Any, *, reliable: bool, timeout_s: float = 30.0) -> None:
    """Before the publisher goes away: with reliable QoS, wait (at most `timeout_s`) until
    every subscriber has acknowledged every frame, so a subscriber that lags behind loses
    none (a publisher that exits drops what is not delivered yet); with best effort, give
    the last frames a moment to leave."""
    if not reliable:
        time.sleep(0.5)
        return
    from rclpy.duration import Duration

    if not pub.wait_for_all_acked(Duration(seconds=timeout_s)):
        print(f"embodied-r play: a subscriber had not received every frame after {timeout_s:.0f} s; "
              "the rest is dropped", file=sys.stderr)


def _image_type() -> Any:
    from sensor_msgs.msg import Image

    return Image


if __name__ == "__main__":
    raise SystemExit(main())

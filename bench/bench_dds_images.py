"""How many large best-effort images arrive between two processes on this host, with the
default Fast DDS transports and with config/fastdds_large_images.xml.

    python -m bench.bench_dds_images [--frames 20] [--width 1280 --height 720] [--rate 10]

Each mode runs a subscriber process and a publisher process (both fresh, so the profile
applies to both participants) and reports frames received / sent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[1] / "config" / "fastdds_large_images.xml"

_SUBSCRIBER = r"""
import sys, time, rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
rclpy.init()
node = rclpy.create_node("dds_bench_sub")
got = []
node.create_subscription(Image, "/dds_bench/image", lambda m: got.append(m.width), qos_profile_sensor_data)
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[1])
try:
    while time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
except Exception:
    pass  # SIGTERM from the benchmark once the publisher is done
print(len(got), flush=True)
"""

_PUBLISHER = r"""
import sys, time, rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
frames, width, height, rate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rclpy.init()
node = rclpy.create_node("dds_bench_pub")
pub = node.create_publisher(Image, "/dds_bench/image", qos_profile_sensor_data)
deadline = time.monotonic() + 20
while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)
data = bytes(width * height * 3)
for i in range(frames):
    pub.publish(Image(width=width, height=height, encoding="rgb8", step=width * 3, data=data))
    time.sleep(1.0 / rate)
time.sleep(0.5)
"""


def measure(profile: Path | None, frames: int = 20, width: int = 1280, height: int = 720,
            rate: float = 10.0, domain: str | None = None) -> int:
    """Frames received by a subscriber process out of `frames` sent by a publisher."""
    env = dict(os.environ)
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    if profile is not None:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(profile)
    if domain is not None:
        env["ROS_DOMAIN_ID"] = domain
    listen_s = 25 + frames / rate
    sub = subprocess.Popen([sys.executable, "-c", _SUBSCRIBER, str(listen_s)], env=env,
                           stdout=subprocess.PIPE, text=True)
    assert sub.stdout is not None
    assert sub.stdout.readline().strip() == "ready"
    subprocess.run([sys.executable, "-c", _PUBLISHER, str(frames), str(width), str(height),
                    str(rate)], env=env, check=True, timeout=120)
    time.sleep(2.0)  # frames still in flight
    sub.terminate()
    out, _ = sub.communicate(timeout=30)
    lines = [line for line in out.split() if line.isdigit()]
    return int(lines[-1]) if lines else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--rate", type=float, default=10.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = {mode: measure(profile, args.frames, args.width, args.height, args.rate)
               for mode, profile in (("default transports", None), ("large-image profile", PROFILE))}
    print(json.dumps({"frames_sent": args.frames, "received": results,
                      "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

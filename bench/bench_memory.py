"""Long-horizon memory benchmark (no models): docs/memory.md "Measured".

    python -m bench.bench_memory [--hours 8] [--questions 500] [--big 100000] [--json OUT]

1. A synthetic long episode: `hours` at one key frame every 3 s (8 h = 9600 key frames),
   observations from a scene vocabulary, and 500 objects ("red fire extinguisher"), each
   seen in ONE stretch of 2-6 consecutive key frames. 500 questions, each about one
   object ("Where did I see the red fire extinguisher?"). recall@32 = fraction of
   questions for which a key frame of that object's stretch is among the 32 selected, for
   `even` and `relevant` selection.
2. Selection latency (relevant) p50/p95 at the long episode and at `big` key frames.
3. Store size per hour with and without 320 px JPEG thumbnails (written by the store).
4. Reopen time at the long episode: open the file, find the episode to continue, restore
   the RAM view (first + newest 256) and the processed-frame record.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.long_term import make_thumbnail, restore_episode
from embodied_r_ros.core.memory.selection import select_keyframes
from embodied_r_ros.core.memory.store import KeyFrameRecord, MemoryStore, StoredPose
from embodied_r_ros.core.perception.progress import ProcessedFrames

PERIOD_S = 3.0
COLORS = ("red", "blue", "green", "yellow", "orange", "purple", "pink", "silver", "golden",
          "black", "white", "brown")
OBJECTS = ("fire extinguisher", "bicycle", "vending machine", "piano", "umbrella", "suitcase",
           "traffic cone", "guitar", "backpack", "ladder", "wheelchair", "sofa", "fridge",
           "printer", "microwave", "aquarium", "globe", "trophy", "skateboard", "kayak",
           "lantern", "mailbox", "telescope", "typewriter", "clock tower", "statue", "tent",
           "scooter", "helmet", "drum kit", "easel", "treadmill", "barbecue grill", "canoe",
           "wheelbarrow", "hammock", "birdcage", "chandelier", "anchor", "surfboard",
           "tricycle", "jukebox", "pinball machine", "car", "truck", "van", "forklift",
           "crate of apples", "teddy bear", "rocking horse")
PLACES = ("a long corridor", "an open hallway", "a small room", "a wide lobby", "a stairwell",
          "an office with desks", "a storage area", "a kitchen", "a parking area",
          "a courtyard", "a glass walkway", "a loading dock")
SURFACES = ("white walls", "grey walls", "a tiled floor", "a carpeted floor", "wooden panels",
            "a concrete floor", "glass doors", "a red sign", "blue carpet", "green plants")
THINGS = ("a door", "a window", "a chair", "a table", "a shelf", "a lamp", "a cabinet",
          "a poster", "a bench", "some boxes", "a trash bin", "a pillar", "a staircase")
SIDES = ("on the left", "on the right", "ahead", "in the distance", "behind a pillar")
ACTIONS = ("move forward", "turn left", "turn right", "move forward", "move forward")
QUESTIONS = ("Where did I see the {obj}?", "How do I get back to the {obj}?",
             "Which way was the {obj} when I passed it?", "Have I seen a {obj}? Where?")


@dataclass
class Episode:
    records: list[KeyFrameRecord]
    stretches: dict[str, list[int]]  # object -> key-frame indices where it is seen


def synthetic_episode(n_keyframes: int, n_objects: int = 500, *, seed: int = 0,
                      episode_id: str = "long", t0: float = 1_000.0) -> Episode:
    """The benchmark's long episode (see the module docstring)."""
    rng = random.Random(seed)
    names = [f"{c} {o}" for o in OBJECTS for c in COLORS]
    rng.shuffle(names)
    names = names[:n_objects]
    # Disjoint stretches spread over the episode (never in the first or last 20).
    slots = list(range(20, n_keyframes - 30, max(8, (n_keyframes - 50) // max(1, n_objects))))
    rng.shuffle(slots)
    stretches: dict[str, list[int]] = {}
    seen_at: dict[int, str] = {}
    for name, start in zip(names, slots, strict=False):
        length = rng.randint(2, 6)
        stretches[name] = list(range(start, start + length))
        for i in stretches[name]:
            seen_at[i] = name
    records = []
    x = y = yaw = 0.0
    for i in range(n_keyframes):
        action = rng.choice(ACTIONS) if i else None
        if action == "turn left":
            yaw += 0.5
        elif action == "turn right":
            yaw -= 0.5
        elif action:
            x, y = x + np.cos(yaw) * 1.5, y + np.sin(yaw) * 1.5
        text = (f"{rng.choice(PLACES)} with {rng.choice(SURFACES)}, {rng.choice(THINGS)} "
                f"{rng.choice(SIDES)} and {rng.choice(THINGS)} {rng.choice(SIDES)}.")
        if i in seen_at:
            text += f" A {seen_at[i]} stands {rng.choice(SIDES)}."
        records.append(KeyFrameRecord(episode_id, i, t0 + PERIOD_S * i, text, action,
                                      "odometry" if action else "",
                                      pose=StoredPose(float(x), float(y), 0.0, float(yaw), "odom")))
    return Episode(records, stretches)


def questions_for(episode: Episode, n: int, seed: int = 1) -> list[tuple[str, list[int]]]:
    rng = random.Random(seed)
    names = list(episode.stretches)
    return [(rng.choice(QUESTIONS).format(obj=name), episode.stretches[name])
            for name in (names * (n // max(1, len(names)) + 1))[:n]]


def build_store(path: Path, episode: Episode, thumbnails: bool = False) -> MemoryStore:
    store = MemoryStore(path, background=False)
    if thumbnails:
        for r in episode.records:
            r.thumbnail = make_thumbnail(synthetic_image(r.keyframe_index), 320)
    store.write_many(episode.records)
    store.set_current_episode(episode.records[0].episode_id)
    return store


def synthetic_image(seed: int, h: int = 480, w: int = 640) -> np.ndarray:
    """A camera-like image: gradients, a few shapes and sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([yy / h * 160 + 40, xx / w * 120 + 60, (xx + yy) / (h + w) * 200], -1)
    for _ in range(6):
        y0, x0 = int(rng.integers(0, h - 60)), int(rng.integers(0, w - 60))
        img[y0:y0 + int(rng.integers(30, 160)), x0:x0 + int(rng.integers(30, 200))] = \
            rng.integers(0, 255, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def recall_at(store: MemoryStore, episode_id: str, questions: list[tuple[str, list[int]]],
              mode: str, max_keyframes: int = 32) -> tuple[float, list[float]]:
    hits, times = 0, []
    for text, needed in questions:
        start = time.perf_counter()
        sel = select_keyframes(store, episode_id, text, max_keyframes=max_keyframes, mode=mode)
        times.append((time.perf_counter() - start) * 1000)
        hits += bool(set(sel.indices) & set(needed))
    return hits / len(questions), times


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def run(hours: float, n_questions: int, big: int, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = int(hours * 3600 / PERIOD_S)
    episode = synthetic_episode(n)
    questions = questions_for(episode, n_questions)
    store = build_store(workdir / "long.sqlite", episode)
    out["keyframes"] = n
    out["questions"] = len(questions)
    for mode in ("even", "relevant"):
        recall, times = recall_at(store, "long", questions, mode)
        out[f"recall@32_{mode}"] = round(recall, 4)
        out[f"select_ms_{mode}_p50"] = round(pct(times, 50), 2)
        out[f"select_ms_{mode}_p95"] = round(pct(times, 95), 2)
    store.close()
    # Reopen: open, find the episode to continue, restore the RAM view and progress.
    reopen = []
    for _ in range(5):
        start = time.perf_counter()
        s = MemoryStore(workdir / "long.sqlite")
        point = s.resume_point()
        assert point is not None and point[1] == n
        memory, progress = EpisodeMemory(point[0], 256), ProcessedFrames()
        restore_episode(s, point[0], memory, progress)
        reopen.append(time.perf_counter() - start)
        s.close()
    out["reopen_s_p50"] = round(statistics.median(reopen), 3)
    out["reopen_s_max"] = round(max(reopen), 3)
    # Size per hour, with and without thumbnails (one hour = 1200 key frames).
    hour = synthetic_episode(int(3600 / PERIOD_S), 50, seed=3, episode_id="hour")
    for thumbs in (False, True):
        path = workdir / f"hour_{thumbs}.sqlite"
        s = build_store(path, hour, thumbnails=thumbs)
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        s.close()
        out[f"mb_per_hour_{'with' if thumbs else 'without'}_thumbnails"] = round(
            path.stat().st_size / 1e6, 2)
    # Latency at `big` key frames.
    if big:
        big_episode = synthetic_episode(big, 500, seed=5, episode_id="big")
        big_questions = questions_for(big_episode, 200, seed=6)
        s = build_store(workdir / "big.sqlite", big_episode)
        recall, times = recall_at(s, "big", big_questions, "relevant")
        out["big_keyframes"] = big
        out["big_recall@32_relevant"] = round(recall, 4)
        out["big_select_ms_p50"] = round(pct(times, 50), 2)
        out["big_select_ms_p95"] = round(pct(times, 95), 2)
        s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, default=8.0)
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--big", type=int, default=100_000, help="0 skips the large-store case")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(args.hours, args.questions, args.big, Path(tmp))
    figures["bench_s"] = round(time.perf_counter() - start, 1)
    for key, value in figures.items():
        print(f"{key:34s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

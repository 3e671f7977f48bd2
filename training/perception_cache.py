"""Perception caching: key frames and VLM descriptions for every video, computed once.

For each video of a split, the core's `extract_keyframes_from_video` picks the key frames
and the perception model describes them with the core's prompts (first frame alone,
later frames as a pair with the previous key frame). Two modes:

* `on_query` (the paper): descriptions are question-aware, so one set per question;
* `streaming`: descriptions are question-free, one set per video, shared by all of its
  questions (what the robot precomputes while it moves).

Storage under `--out` (every write is crash-safe, so an interrupted run resumes without
redoing or losing finished work):

* `keyframes[.shard<i>of<n>].jsonl` - append-only, one line per video (chosen frame
  numbers, fps ...);
* `descriptions.<mode>[.shard<i>of<n>].jsonl` - append-only, one line per described key frame,
  written and fsync'ed after every `describe_batch` call; a line cut short by a kill is
  ignored on reading and the file is repaired before the next append;
* `<split>.<mode>.jsonl` - the training/evaluation records, written through a temporary
  file and a rename once every question of the split is described. Each record is the
  question record plus `solution` (answer letter), `prompt` (chat messages built by the
  core's `build_reasoning_messages` over `render_video_text`), `video_text`, `frames`
  and `keyframes`.

Videos are found through each record's `video` field, written by `prepare` (a file, or a
member of one of VSI-Bench's zip archives, extracted on demand into `<out>/.videos/` and
deleted again once its key frames are decoded); `--video-root` instead reads every video
as `<root>/<video_path>` (records prepared with `--no-video-check`, or a moved tree).

    embodied-r-train cache-perception --config training/configs/perception_tiny.yaml \\
        --data artifacts/dry_run/prepared --split train --out artifacts/dry_run/cache \\
        [--mode streaming] [--workers 0] [--shard 0/4]

Key frames are extracted by `--workers` processes ahead of the video being described
(default 0 = auto: one process per two cores, each extractor using its two cores'
threads; `--workers N` sets the number, and the cores are shared out among them); the VLM
calls stay in this process, batched. Several machines:
run `--shard i/n` for each i (a deterministic split by video path, so every machine
computes the same split), copy the shard files (`*.shard<i>of<n>.jsonl`) into one
folder, then run once without `--shard`: it finds every description already made,
loads no model and writes the records.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.append_only import AppendOnlyJsonl, write_json_atomic
from embodied_r_ros.core.shards import available_cores, shard_argument
from embodied_r_training.data import (
    group_by_video,
    read_jsonl,
    record_video,
    write_jsonl_atomic,
)
from embodied_r_training.videos import VideoMaterialiser

log = logging.getLogger("embodied_r_training.perception_cache")

MODES = ("on_query", "streaming")
UNIT_SEP = "::"


# --------------------------------------------------------------------------- stores
# AppendOnlyJsonl (crash-safe, append-only JSONL) lives in the core: replay evaluation
# uses the same store.


@dataclass
class CacheStats:
    """What one `cache_split` call did."""

    videos: int = 0
    videos_skipped: int = 0  # already complete: not even decoded
    missing_videos: list[str] = field(default_factory=list)
    model_calls: int = 0  # describe_batch calls
    frames_described: int = 0
    frames_reused: int = 0
    records_written: int = 0
    records_skipped: int = 0  # questions whose video file is missing
    videos_extracted: int = 0  # zip members unpacked for decoding (then removed)
    complete: bool = False
    seconds: float = 0.0


def unit_key(record: Mapping[str, Any], mode: str) -> str:
    """The description set a question uses: the video (streaming) or video + question."""
    if mode == "streaming":
        return str(record["video_path"])
    return f"{record['video_path']}{UNIT_SEP}{record['Question_id']}"


def _description_files(out: Path, mode: str) -> list[Path]:
    return sorted(out.glob(f"descriptions.{mode}*.jsonl"))


def load_descriptions(out: Path, mode: str) -> dict[tuple[str, int], dict[str, Any]]:
    """(unit, key-frame index) -> stored description, from every shard file of a mode."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    for path in _description_files(out, mode):
        for row in AppendOnlyJsonl(path).read():
            done[(row["unit"], int(row["frame"]))] = row
    return done


def load_keyframes(out: Path) -> dict[str, dict[str, Any]]:
    """video path -> stored key-frame selection, from every shard file."""
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("keyframes*.jsonl")):
        for row in AppendOnlyJsonl(path).read():
            rows[row["video"]] = row
    return rows


# --------------------------------------------------------------------------- records
def build_record(
    record: Mapping[str, Any], mode: str, keyframes: Mapping[str, Any], texts: Sequence[str],
    prompts: Any = None, actions: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """A cached training/evaluation record: the question plus its LM prompt (built with
    `prompts`, a core PromptSet, or the shipped wording). `actions` (one per key frame,
    None where unknown) are motions measured by odometry: they replace the VLM's guessed
    action of every later key frame, as the robot's perception worker does with
    `perception.use_odometry`."""
    from embodied_r_ros.core.memory.episode import render_video_text
    from embodied_r_ros.core.perception.parser import parse_frame_description
    from embodied_r_ros.core.prompts.reasoning import build_reasoning_messages
    from embodied_r_ros.core.types import FrameDescription

    descriptions = []
    for i, text in enumerate(texts):
        parsed = parse_frame_description(text, first=(i == 0))
        measured = actions[i] if actions is not None and i > 0 and i < len(actions) else None
        descriptions.append(
            FrameDescription(
                keyframe_index=i,
                observation=parsed.observation,
                action=measured or parsed.action,
                raw_text=text,
                action_source="odometry" if measured else ("vlm" if parsed.action else ""),
                mode=mode,
            )
        )
    video_text = render_video_text(descriptions, prompts)
    return {
        **dict(record),
        "mode": mode,
        "solution": record["answer"],
        "prompt": build_reasoning_messages(video_text, record["question"], prompts),
        "video_text": video_text,
        "frames": [{"index": d.keyframe_index, "action": d.action, "observation": d.observation} for d in descriptions],
        "keyframes": {k: keyframes[k] for k in ("source_frames", "n_sampled", "video_fps", "n_source_frames")
                      if k in keyframes},
    }


# --------------------------------------------------------------------------- main loop
def _requests_for(
    units: Sequence[tuple[str, str | None]], images: Sequence[Any], done: Mapping[tuple[str, int], Any],
    prompts: Any = None,
) -> list[tuple[str, int, list[Any], str]]:
    """Missing (unit, frame, images, prompt) requests for one video."""
    from embodied_r_ros.core.prompts.perception import first_frame_prompt, pair_prompt

    requests = []
    for unit, question in units:
        for i in range(len(images)):
            if (unit, i) in done:
                continue
            if i == 0:
                requests.append((unit, 0, [images[0]], first_frame_prompt(question, prompts)))
            else:
                requests.append((unit, i, [images[i - 1], images[i]], pair_prompt(question, prompts)))
    return requests


def _extract_job(ref: Any, cache_dir: str, keep: bool, params: Any, threads: int | None = None
                 ) -> tuple[dict[str, Any], list[Any], bool]:
    """Key frames of one video (in this process or a pool worker): (row, images,
    extracted). `threads`: the extractor's own ORB/decoder threads (None = its default,
    every core); pool workers get their share of the cores so the pool does not
    oversubscribe them."""
    from embodied_r_ros.core.keyframes.extraction import extract_keyframes_from_video

    materialiser = VideoMaterialiser(cache_dir, keep=keep)
    with materialiser.local_file(ref) as path:
        kf = extract_keyframes_from_video(path, params, return_images=True, workers=threads)
    row = {
        "source_frames": list(kf.source_frames),
        "sampled_indices": list(kf.sampled_indices),
        "n_sampled": kf.n_sampled,
        "video_fps": kf.video_fps,
        "n_source_frames": kf.n_source_frames,
        "seconds": kf.seconds,
    }
    return row, list(kf.images), materialiser.extracted > 0


def auto_workers() -> int:
    """Default pool size: one process per two cores. The extractor already runs ORB and
    the decoder on threads (about 1.3-1.5 cores busy for one video on 2 cores), so each
    process keeps two cores; on 2 cores this is the one-process path (measured there:
    `bench/bench_cache_perception.py`)."""
    return max(1, available_cores() // 2)


class _KeyFrameStage:
    """Key-frame extraction for a sequence of videos, in order, on `workers` processes.

    With one worker everything runs in this process (no pool). With more, up to
    `2 * workers` videos are extracted ahead of the one being described, so the pool
    stays busy while the VLM works; results are handed back in submission order. Worker
    processes are started with "spawn": the parent may hold a loaded model and threads,
    which a forked child must not inherit.
    """

    def __init__(self, workers: int, cache_dir: Path, keep: bool, params: Any) -> None:
        self.workers = workers
        threads = None if workers == 1 else max(1, available_cores() // workers)
        self.args = (str(cache_dir), keep, params, threads)
        self.pool: Any = None
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=workers,
                                            mp_context=multiprocessing.get_context("spawn"))

    def run(self, jobs: Sequence[tuple[Any, Any]]
            ) -> Iterator[tuple[Any, tuple[dict[str, Any], list[Any], bool]]]:
        """Yield (key, (row, images, extracted)) for each (key, VideoRef) job, in order."""
        if self.pool is None:
            for key, ref in jobs:
                yield key, _extract_job(ref, *self.args)
            return
        from collections import deque

        pending: deque[tuple[Any, Any]] = deque()
        queue = iter(jobs)
        for key, ref in queue:
            pending.append((key, self.pool.submit(_extract_job, ref, *self.args)))
            if len(pending) >= 2 * self.workers:
                break
        while pending:
            key, future = pending.popleft()
            result = future.result()
            nxt = next(queue, None)
            if nxt is not None:
                pending.append((nxt[0], self.pool.submit(_extract_job, nxt[1], *self.args)))
            yield key, result

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def cache_split(
    records: Sequence[Mapping[str, Any]],
    *,
    perceiver: Any,
    out: str | Path,
    video_root: str | Path | None = None,
    split: str,
    mode: str = "on_query",
    keyframe_params: Any = None,
    batch_size: int = 8,
    settings: Any = None,
    shard_index: int = 0,
    num_shards: int = 1,
    shard: Any = None,
    workers: int = 1,
    progress: bool = True,
    video_cache: str | Path | None = None,
    keep_extracted: bool = False,
    prompts: Any = None,
    motion: Callable[[Mapping[str, Any], Mapping[str, Any]], Sequence[str | None] | None] | None = None,
) -> CacheStats:
    """Describe every key frame the split's questions need, then write the records.

    Work already in `out` is reused. With a shard (`shard`, a core `Shard`, or
    `shard_index` / `num_shards`) only the videos of that shard are described by this
    call (a deterministic split by video path, `embodied_r_ros.core.shards`), into files
    named after the shard; the records file is written when the descriptions of every
    question of the split are present (from any shard's files in `out`). `workers`
    processes extract key frames (0 = `auto_workers()`), while this process makes the VLM
    calls, batched as before. `perceiver` is a Perceiver or a function returning one,
    called only when there is something to describe (a run that only assembles records
    loads no model). Videos come from each record's `video` field, or from `video_root /
    video_path` when `video_root` is given; zip members are extracted into `video_cache`
    (default `<out>/.videos`) and removed after decoding unless `keep_extracted`.
    `prompts` (a core PromptSet, e.g. from a `prompts_file`) builds the perception prompts
    and the records' reasoning prompts; None = the shipped wording, as on the robot.
    `motion(record, keyframes)` gives the odometry-measured action of each key frame of a
    question's video (see `build_record`), or None to keep the VLM's actions.
    """
    from tqdm import tqdm

    from embodied_r_ros.core.shards import Shard

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    shard = shard if shard is not None else Shard(shard_index, num_shards)
    workers = auto_workers() if workers == 0 else workers
    if workers < 1:
        raise ValueError("workers must be at least 1 (0 = auto)")
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kf_store = AppendOnlyJsonl(out / f"keyframes{shard.suffix}.jsonl")
    desc_store = AppendOnlyJsonl(out / f"descriptions.{mode}{shard.suffix}.jsonl")
    keyframes = load_keyframes(out)
    done = load_descriptions(out, mode)
    stats = CacheStats()
    materialiser = VideoMaterialiser(video_cache or out / ".videos", keep=keep_extracted)
    videos = list(group_by_video(records).items())
    mine = [(v, qs) for v, qs in videos if shard.owns(v)]
    # Videos to decode: not complete yet, and present.
    jobs: list[tuple[str, Any]] = []
    units_of: dict[str, list[tuple[str, str | None]]] = {}
    for video_path, questions in mine:
        stats.videos += 1
        if mode == "streaming":
            units: list[tuple[str, str | None]] = [(unit_key(questions[0], mode), None)]
        else:
            units = [(unit_key(q, mode), q["question"]) for q in questions]
        known = keyframes.get(video_path)
        if known is not None and all(
            (u, i) in done for u, _ in units for i in range(len(known["source_frames"]))
        ):
            stats.videos_skipped += 1
            stats.frames_reused += len(units) * len(known["source_frames"])
            continue
        ref = record_video(questions[0], video_root)
        if not materialiser.exists(ref):
            stats.missing_videos.append(video_path)
            log.warning("video missing, its questions are skipped: %s", ref.describe())
            continue
        units_of[video_path] = units
        jobs.append((video_path, ref))

    # the Perceiver; None until one is needed when `perceiver` is a function making it
    model: Any = perceiver if hasattr(perceiver, "describe_batch") or not callable(perceiver) else None
    stage = _KeyFrameStage(min(workers, max(1, len(jobs))), materialiser.cache_dir,
                           keep_extracted, keyframe_params)
    bar = tqdm(total=len(jobs), desc=f"perception {split}/{mode}", unit="video",
               disable=not progress)
    try:
        for video_path, (row, images, extracted) in stage.run(jobs):
            bar.update(1)
            stats.videos_extracted += int(extracted)
            row = {"video": video_path, **row}
            known = keyframes.get(video_path)
            if known is not None and known["source_frames"] != row["source_frames"]:
                raise RuntimeError(
                    f"{video_path}: key frames differ from the cached ones ({known['source_frames']} vs "
                    f"{row['source_frames']}); the key-frame parameters changed - use a new --out folder"
                )
            if known is None:
                kf_store.append_many([row])
                keyframes[video_path] = row
            requests = _requests_for(units_of[video_path], images, done, prompts)
            stats.frames_reused += len(units_of[video_path]) * len(images) - len(requests)
            if requests and model is None:
                model = perceiver()
            for start in range(0, len(requests), batch_size):
                chunk = requests[start : start + batch_size]
                t0 = time.perf_counter()
                texts = model.describe_batch([(imgs, prompt) for _, _, imgs, prompt in chunk], settings)
                stats.model_calls += 1
                if len(texts) != len(chunk):
                    raise RuntimeError(f"perceiver returned {len(texts)} texts for {len(chunk)} requests")
                per_item = (time.perf_counter() - t0) / len(chunk)
                rows = [
                    {"unit": unit, "frame": i, "text": text, "latency_s": round(per_item, 4)}
                    for (unit, i, _, _), text in zip(chunk, texts)
                ]
                desc_store.append_many(rows)
                for r in rows:
                    done[(r["unit"], r["frame"])] = r
                stats.frames_described += len(chunk)
                bar.set_postfix(described=stats.frames_described, reused=stats.frames_reused)
    finally:
        bar.close()
        stage.close()
        if model is not None and model is not perceiver:
            model.close()

    # Assemble the records once every question's descriptions exist (from any shard).
    keyframes = load_keyframes(out)
    done = load_descriptions(out, mode)
    assembled = []
    missing = set(stats.missing_videos)
    for record in records:
        if record["video_path"] in missing:
            stats.records_skipped += 1
            continue
        known = keyframes.get(record["video_path"])
        if known is None:
            break
        unit = unit_key(record, mode)
        n = len(known["source_frames"])
        if not all((unit, i) in done for i in range(n)):
            break
        assembled.append(build_record(record, mode, known, [done[(unit, i)]["text"] for i in range(n)],
                                      prompts, actions=motion(record, known) if motion else None))
    stats.complete = len(assembled) + stats.records_skipped == len(records)
    if stats.complete:
        stats.records_written = write_jsonl_atomic(out / f"{split}.{mode}.jsonl", assembled)
    stats.seconds = round(time.perf_counter() - started, 3)
    return stats


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-r-train cache-perception",
        description="Key frames + VLM descriptions for a split, cached and resumable.",
    )
    parser.add_argument("--config", required=True,
                        help="YAML with perception_model (a ModelSpec), keyframes, mode, batch_size")
    parser.add_argument("--data", required=True,
                        help="folder with <split>.jsonl from `prepare`, or a records JSONL file")
    parser.add_argument("--split", default="train")
    parser.add_argument("--video-root", default=None,
                        help="read every video as <root>/<video_path> instead of the records' 'video' field")
    parser.add_argument("--video-cache", default=None,
                        help="where zip members are extracted for decoding (default: <out>/.videos)")
    parser.add_argument("--keep-extracted", action="store_true",
                        help="keep extracted zip members instead of deleting each after use")
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=MODES, default=None, help="overrides the config's mode")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions (smoke runs)")
    parser.add_argument("--shard", type=shard_argument, default=None, metavar="I/N",
                        help="describe only the videos of shard I of N (deterministic split by "
                        "video path; run every shard, then once without --shard to write the records)")
    parser.add_argument("--num-shards", type=int, default=1, help="older spelling of --shard: N")
    parser.add_argument("--shard-index", type=int, default=0, help="older spelling of --shard: I")
    parser.add_argument("--workers", type=int, default=0,
                        help="processes extracting key frames (default 0 = one per two cores; "
                        "1 = this process only); the cores are shared out among them")
    parser.add_argument("--prompts", default="",
                        help="prompt templates file (core prompt_set format) instead of the config's "
                        "prompts_file; the same file the robot's prompts.file parameter reads")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    from embodied_r_ros.core.backends.factory import make_perceiver
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_ros.core.keyframes.rules import KeyFrameParams
    from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
    from embodied_r_ros.core.shards import Shard
    from embodied_r_training.config import read_yaml_config

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"))
    cfg = read_yaml_config(args.config, args.overrides)
    data_path = Path(args.data)
    records = read_jsonl(data_path / f"{args.split}.jsonl" if data_path.is_dir() else data_path)
    if args.limit:
        records = records[: args.limit]
    spec = ModelSpec.from_dict(cfg["perception_model"])
    shard = args.shard or Shard(args.shard_index, args.num_shards)
    mode = args.mode or cfg.get("mode", "on_query")
    stats = cache_split(
        records,
        perceiver=lambda: make_perceiver(spec),  # loaded only if something needs describing
        video_root=args.video_root,
        out=args.out,
        split=args.split,
        mode=mode,
        keyframe_params=KeyFrameParams(**(cfg.get("keyframes") or {})),
        batch_size=args.batch_size or int(cfg.get("batch_size", spec.batch_size)),
        shard=shard,
        workers=args.workers,
        progress=not args.no_progress,
        video_cache=args.video_cache,
        keep_extracted=args.keep_extracted,
        prompts=load_prompt_set(args.prompts or cfg.get("prompts_file", "")),
    )
    summary = {"split": args.split, "shard": str(shard), **stats.__dict__}
    write_json_atomic(Path(args.out) / f"{args.split}.{mode}{shard.suffix}.summary.json", summary)
    print(json.dumps(summary, indent=2))
    return 0 if stats.complete or shard.count > 1 else 1

"""`embodied-r replay-eval`: evaluate the robot pipeline on rosbags with a question file.

    embodied-r replay-eval --bag run1.mcap --questions run1_questions.json \\
        --perception-model /models/qwen2.5-vl-7b --reasoning-model /models/embodied-r \\
        --mode fast --out results/run1.json
    embodied-r replay-eval --bag bags/ --questions test.jsonl --mode fast --out results/test.json

`--bag` is one bag (a rosbag2 folder, sqlite3 or MCAP, or a storage file inside one) or a
folder of bags; with a folder, each question record names its bag (a `bag`, `video_id`
or `video_path` field; see `embodied_r_ros.evaluation.questions`) and each bag is its own
episode (reset between bags). Two modes:

* `fast`: the core pipeline in this process, frames fed in stream-time order as fast as
  the models allow, no DDS (`evaluation.fast`);
* `live` (default): the node graph in its own processes, the bag published over DDS at
  `--rate` times recorded speed (`evaluation.live`): latency as on the robot.

Results are appended per question to `<out stem>.results.jsonl`; running the same
command again resumes (finished questions are not asked again). At the end the summary
is written as `<out>` (JSON), `<out stem>.md` and `<out stem>.png` (accuracy per
category, latency per stage); see `evaluation.results`. `--shard i/n` evaluates only the
bags of shard i (a deterministic split by bag name) into `<out stem>.shard<i>of<n>...`
files; `--report-only` on the same `--out` (with the shard files copied beside it) merges
them into one summary without running a model.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_r_ros.core.errors import BagError, EmbodiedRError, ErrorCode
from embodied_r_ros.core.settings import LOSSLESS_CAMERA, LOSSLESS_DEPTH, Settings, load_settings
from embodied_r_ros.core.shards import Shard, available_cores, shard_argument
from embodied_r_ros.evaluation import models as model_setup
from embodied_r_ros.evaluation.questions import (
    QuestionItem,
    assign_to_bags,
    find_bags,
    load_questions,
)
from embodied_r_ros.evaluation.results import (
    QuestionResult,
    ResultStore,
    summarize,
    write_reports,
)

if TYPE_CHECKING:  # imported where used: each mode loads only what it needs
    from embodied_r_ros.evaluation.fast import FastReplay
    from embodied_r_ros.evaluation.live import LiveReplay

LOG = logging.getLogger("embodied_r_ros.evaluation")
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PARAMS = REPO_ROOT / "config" / "embodied_r.yaml"
DEFAULT_ARTIFACTS = REPO_ROOT / "artifacts"
EMBEDDED_NODE = "embodied_r"  # the node whose parameter section the fast mode reads


def build_parser(prog: str = "embodied-r replay-eval") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                epilog="See `embodied_r_ros.evaluation` for the file formats.")
    p.add_argument("--bag", type=Path, required=False,
                   help="a rosbag2 bag, or a folder of bags (each question names its bag)")
    p.add_argument("--questions", type=Path, required=False,
                   help="question file: JSON list / {'questions': [...]} or JSON lines")
    p.add_argument("--mode", choices=("live", "fast"), default="live",
                   help="live: the node graph over DDS (timing as on the robot, default); "
                        "fast: the core pipeline in this process, no DDS")
    p.add_argument("--out", type=Path, default=Path("replay_eval.json"),
                   help="summary JSON; results, episodes, .md and .png go beside it")
    p.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS,
                   help="ROS 2 parameter file (default: config/embodied_r.yaml)")
    p.add_argument("--perception-model", default="", help="VLM id or path")
    p.add_argument("--reasoning-model", default="", help="reasoning LM id or path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="parameter override, e.g. camera.reliability=reliable (repeatable)")
    p.add_argument("--tiny-models", action="store_true",
                   help="use tiny random local models for unset models (plumbing checks only)")
    p.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS,
                   help="where tiny models are built (default: artifacts/)")
    p.add_argument("--graph", choices=["embedded", "split"], default="embedded",
                   help="live mode: one process (default) or the three split nodes")
    p.add_argument("--camera-qos", choices=("reliable", "robot"), default="reliable",
                   help="live mode: reliable (default): every frame of the bag reaches the "
                        "graph (camera.reliability reliable, camera.depth "
                        f"{LOSSLESS_DEPTH}; the replay waits for a node that falls behind), so "
                        "key frames are those of --mode fast; robot: the parameter file's "
                        "camera QoS (best effort), frames are lost when the node is busy and "
                        "the run is marked LOSSY")
    p.add_argument("--rate", type=float, default=4.0,
                   help="live mode: replay speed over recorded time (0 = as fast as possible)")
    p.add_argument("--topic", default=None,
                   help="image topic in the bags (default: the first Image/CompressedImage topic)")
    p.add_argument("--stamps", choices=("header", "record"), default="header",
                   help="frame times: header stamps (zero ones fall back to the record time; "
                        "default) or the record time of every message")
    p.add_argument("--reorder-window", type=int, default=16,
                   help="messages re-sorted by stamp while reading (later ones that are still "
                        "out of order are dropped); 0 = keep the recorded order")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per question")
    p.add_argument("--startup-timeout", type=float, default=180.0,
                   help="live mode: seconds to wait for the nodes to load their models")
    p.add_argument("--jobs", type=int, default=1,
                   help="fast mode: replay this many bags at once on as many processes, each "
                        "loading the models (0 = every core); best with the openai backend")
    p.add_argument("--shard", type=shard_argument, default=None, metavar="I/N",
                   help="evaluate only shard I of N (bags split deterministically by name)")
    p.add_argument("--allow-missing", action="store_true",
                   help="skip questions whose bag is not in the folder (default: an error)")
    p.add_argument("--fresh", action="store_true",
                   help="discard the results of an earlier run with this --out")
    p.add_argument("--report-only", action="store_true",
                   help="only rebuild the summary from the results files (merges shards)")
    p.add_argument("--quiet-nodes", action="store_true", help="live mode: do not echo node logs")
    return p


def plan(args: argparse.Namespace) -> tuple[dict[str, Path], dict[str, list[QuestionItem]],
                                            list[str]]:
    """(bags, questions per bag, names without a bag) for the run, shard applied."""
    items = load_questions(args.questions)
    bag = Path(args.bag)
    missing: list[str]
    if (bag / "metadata.yaml").exists() or (bag.is_file() and (bag.parent / "metadata.yaml").exists()):
        bag_dir = bag if bag.is_dir() else bag.parent
        bags, groups, missing = {bag_dir.name: bag_dir}, {bag_dir.name: items}, []
        for item in items:
            item.bag = bag_dir.name
    else:
        bags = find_bags(bag)
        groups, missing = assign_to_bags(items, bags, allow_missing=args.allow_missing)
    shard: Shard | None = args.shard
    if shard is not None:
        groups = {k: v for k, v in groups.items() if shard.owns(k)}
    return bags, groups, missing


def resolve_parameters(args: argparse.Namespace) -> tuple[Settings, dict[str, Any], bool]:
    """(settings, overrides for the graph, tiny models used)."""
    overrides = {**model_setup.model_overrides(args.perception_model, args.reasoning_model),
                 **model_setup.parse_set(args.overrides)}
    if args.mode == "live" and getattr(args, "camera_qos", "reliable") == "reliable":
        # lossless unless the user set the camera QoS explicitly (--set wins)
        for key, value in LOSSLESS_CAMERA.items():
            overrides.setdefault(key, value)
    missing = model_setup.missing_models(args.params_file, overrides)
    tiny = False
    if missing:
        if not args.tiny_models:
            raise EmbodiedRError(
                f"no {' and no '.join(missing)} model is configured; pass --perception-model / "
                "--reasoning-model (or set them in the parameter file), or --tiny-models to "
                "check the plumbing with tiny random models", code=ErrorCode.MODEL_UNAVAILABLE)
        tiny_set = model_setup.tiny_overrides(args.artifacts, missing)
        overrides = {**tiny_set, **overrides}
        print(model_setup.tiny_banner(missing, tiny_set))
        tiny = True
        if len(missing) == 2:  # local folders only: never ask the hub
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = load_settings(args.params_file, node_name=EMBEDDED_NODE, overrides=overrides)
    return settings, overrides, tiny


def setup_record(args: argparse.Namespace, settings: Settings, tiny: bool) -> dict[str, Any]:
    return {"mode": args.mode, "perception_model": settings.perception.model,
            "reasoning_model": settings.reasoning.model,
            "perception_mode": settings.perception.mode,
            "questions": str(Path(args.questions).resolve()), "bag": str(Path(args.bag).resolve()),
            "params_file": str(args.params_file), "overrides": model_setup.parse_set(args.overrides),
            "graph": args.graph if args.mode == "live" else "", "tiny_models": tiny,
            "camera_reliability": settings.camera.reliability if args.mode == "live" else "",
            "shard": str(args.shard) if args.shard else ""}


def make_runner(args: argparse.Namespace, settings: Settings, overrides: dict[str, Any]
                ) -> AbstractContextManager[FastReplay | LiveReplay]:
    if args.mode == "fast":
        from contextlib import closing

        from embodied_r_ros.evaluation.fast import FastReplay

        return closing(FastReplay(settings))
    from embodied_r_ros.evaluation.live import LiveReplay

    return LiveReplay(settings, args.params_file, overrides, graph=args.graph, rate=args.rate,
                      startup_timeout_s=args.startup_timeout,
                      echo=None if args.quiet_nodes else sys.stdout)


def evaluate(args: argparse.Namespace) -> int:
    """Run (or resume) the evaluation described by parsed arguments; 0 when every bag
    could be replayed."""
    store = ResultStore(args.out, args.shard)
    if args.report_only:
        results = list(store.done(all_shards=True).values())
        summary = summarize(results, episodes=store.episode_records(all_shards=True),
                            setup=store.setup())
        write_reports(store, summary, "replay evaluation")
        print(f"== summary of {len(results)} results written to {store.summary_json}")
        return 0
    if args.bag is None or args.questions is None:
        print("replay-eval: --bag and --questions are required", file=sys.stderr)
        return 2
    bags, groups, missing = plan(args)
    settings, overrides, tiny = resolve_parameters(args)
    setup = setup_record(args, settings, tiny)
    store.check_setup(setup, fresh=args.fresh)
    done = store.done()
    todo = {k: [i for i in v if i.question_id not in done] for k, v in groups.items()}
    todo = {k: v for k, v in todo.items() if v}
    n_all = sum(len(v) for v in groups.values())
    n_todo = sum(len(v) for v in todo.values())
    print(f"== {n_all} questions on {len(groups)} bag(s); {n_all - n_todo} already answered "
          f"in {store.results.path}, asking {n_todo} ({args.mode} mode)")
    if missing:
        print(f"== skipped: {len(missing)} bag name(s) not in the folder: {', '.join(missing[:5])}")
    bag_errors: dict[str, str] = {}
    started = time.monotonic()
    jobs = args.jobs if args.jobs > 0 else available_cores()
    if jobs > 1 and args.mode != "fast":
        raise EmbodiedRError("--jobs needs --mode fast (the live mode replays into one graph)",
                             code=ErrorCode.INVALID_REQUEST)
    jobs = min(jobs, len(todo))
    if jobs > 1:
        from embodied_r_ros.evaluation.parallel import run_parallel

        def bag_failed(key: str, exc: Exception) -> None:
            bag_errors[key] = str(exc)
            print(f"== {key}: cannot be replayed: {exc}", file=sys.stderr)

        print(f"== replaying {len(todo)} bags on {jobs} processes")
        run_parallel(settings, bags, todo, jobs,
                     {"topic": args.topic, "stamps": args.stamps,
                      "reorder_window": args.reorder_window, "timeout_s": args.timeout},
                     on_result=store.add, on_episode=store.add_episode, on_bag_error=bag_failed)
    elif todo:
        with make_runner(args, settings, overrides) as runner:
            for n, (key, items) in enumerate(todo.items(), 1):
                print(f"== [{n}/{len(todo)}] {key}: {len(items)} question(s)")
                try:
                    record = runner.run_bag(key, bags[key], items, topic=args.topic,
                                            stamps=args.stamps, reorder_window=args.reorder_window,
                                            timeout_s=args.timeout, on_result=store.add)
                except BagError as exc:
                    bag_errors[key] = str(exc)
                    print(f"== {key}: cannot be replayed: {exc}", file=sys.stderr)
                    continue
                store.add_episode(record.to_json())
    done = store.done()
    results = [done[i.question_id] for v in groups.values() for i in v if i.question_id in done]
    episodes = store.episode_records()
    summary = summarize(results, expected=n_all, episodes={k: episodes[k] for k in groups
                                                            if k in episodes},
                        bag_errors=bag_errors, setup=setup)
    write_reports(store, summary, f"replay evaluation ({args.mode})")
    acc = summary["accuracy"]
    print(f"== {len(results)}/{n_all} answered in {time.monotonic() - started:.1f}s"
          + (f"; accuracy {acc['average']:.1f}%" if "average" in acc else ""))
    for bag, f in summary["frames"].items():
        if f["lossy"]:
            print(f"== LOSSY: {bag}: the graph received {f['received']} of {f['sent']} frames; "
                  "key frames can differ from --mode fast (--camera-qos reliable is lossless)")
    print(f"== summary: {store.summary_json}, {store.markdown}, {store.plot}")
    return 1 if bag_errors else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "WARNING"),
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return evaluate(args)
    except EmbodiedRError as exc:
        print(f"replay-eval: {exc}", file=sys.stderr)
        return 2


__all__ = ["QuestionResult", "build_parser", "evaluate", "main"]

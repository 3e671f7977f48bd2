"""`embodied-r demo`: the whole node graph on the bundled synthetic sample.

Steps: make the sample (synthetic egocentric clip as a rosbag2 MCAP file + questions)
and, when no models are configured, the tiny models; start the graph (one embedded
process by default, or the three split nodes); replay the bag onto the camera topic; ask
every sample question through the AskSpatial service; print the key frames, each frame's
description, each answer with its reasoning, and the per-stage latency.

With real models configured (--perception-model / --reasoning-model, or in the
parameter file) those are used. Without, tiny random models are built locally and used;
their text is noise and their answers are meaningless: they only prove the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from embodied_r_ros.core import config as cfg

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PARAMS = REPO_ROOT / "config" / "embodied_r.yaml"
DEFAULT_ARTIFACTS = REPO_ROOT / "artifacts"

# Short generations keep the tiny-model demo fast; real models use the YAML values.
TINY_MAX_NEW_TOKENS = {"perception": 24, "reasoning": 48}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embodied-r demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS,
                        help="ROS 2 parameter file (default: config/embodied_r.yaml)")
    parser.add_argument("--perception-model", default="", help="VLM id or path")
    parser.add_argument("--reasoning-model", default="", help="reasoning LM id or path")
    parser.add_argument("--graph", choices=["embedded", "split"], default="embedded",
                        help="one process (default) or the three split nodes")
    parser.add_argument("--bag", type=Path, default=None,
                        help="rosbag2 folder/file to replay (default: the generated sample)")
    parser.add_argument("--questions", type=Path, default=None,
                        help="question file (default: the sample's questions.json)")
    parser.add_argument("--rate", type=float, default=4.0,
                        help="replay speed factor over recorded time (0 = as fast as possible)")
    parser.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS,
                        help="where the sample, tiny models and the report are written")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per question")
    parser.add_argument("--startup-timeout", type=float, default=180.0,
                        help="seconds to wait for the nodes to load their models")
    parser.add_argument("--quiet-nodes", action="store_true", help="do not echo node logs")
    return parser.parse_args(argv)


def ensure_sample(artifacts: Path) -> tuple[Path, Path]:
    from embodied_r_ros.sample_data.cli import main as make_sample

    out = artifacts / "sample"
    bag, questions = out / "sample.mcap", out / "questions.json"
    if not (bag.exists() and questions.exists()):
        print(f"== making the synthetic sample in {out}")
        if make_sample([str(out)]) != 0:
            raise SystemExit("demo: making the sample failed")
    return bag, questions


def resolve_models(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Model overrides for the graph, and whether the tiny models are in use."""
    params = cfg.load_parameters(args.params_file)
    overrides: dict[str, Any] = {}
    if args.perception_model:
        overrides["perception.model"] = args.perception_model
    if args.reasoning_model:
        overrides["reasoning.model"] = args.reasoning_model
    missing = [role for role in ("perception", "reasoning")
               if not overrides.get(f"{role}.model", params[f"{role}.model"])]
    if not missing:
        return overrides, False
    from embodied_r_ros.core.tiny_models import build_tiny_models

    paths = build_tiny_models(args.artifacts / "tiny_models")
    tiny_path = {"perception": paths.vlm, "reasoning": paths.lm}
    print(textwrap.dedent(f"""
        == NO {' AND '.join(m.upper() for m in missing)} MODEL CONFIGURED: using tiny random
           models built locally ({', '.join(f'{m}: {tiny_path[m]}' for m in missing)}).
           Their text and answers are MEANINGLESS noise; they only exercise the pipeline.
           Pass --perception-model/--reasoning-model (or set perception.model and
           reasoning.model in the parameter file) to use real models.
        """))
    for role in missing:
        overrides.update({f"{role}.model": str(tiny_path[role]), f"{role}.backend": "transformers",
                          f"{role}.device": "cpu", f"{role}.dtype": "float32",
                          f"{role}.temperature": 0.0,
                          f"{role}.max_new_tokens": TINY_MAX_NEW_TOKENS[role]})
    return overrides, True


def read_frames(bag: Path):  # type: ignore[no-untyped-def]
    from embodied_r_ros.sample_data.bag_io import read_image_bag

    for item in read_image_bag(bag):
        yield item.stamp_s, item.image, item.frame_id


def read_poses(bag: Path, topic: str) -> list[Any]:
    """The bag's odometry poses, or [] when it has no such topic."""
    from embodied_r_ros.core.errors import InvalidRequestError
    from embodied_r_ros.sample_data.bag_io import read_odometry

    try:
        return read_odometry(bag, topic)
    except InvalidRequestError:
        return []


def short(text: str, width: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def print_report(client: Any, summary: Any, tiny: bool) -> None:
    print("\n== key frames chosen")
    for kf in client.keyframes:
        print(f"  key frame {kf.keyframe_index:2d}: sampled frame {kf.sampled_index:3d}, "
              f"source frame {kf.source_index:4d}, t={kf.header.stamp.sec + kf.header.stamp.nanosec * 1e-9:6.2f}s, "
              f"{kf.reason}, overlap {kf.overlap:.2f}")
    print("\n== frame descriptions (perception)")
    for d in sorted(client.descriptions, key=lambda d: d.keyframe_index):
        action = f"after {d.action} ({d.action_source}), " if d.action else ""
        print(f"  frame {d.keyframe_index:2d} [{d.latency_s:5.2f}s] {action}observe: "
              f"{short(d.observation or d.raw_text, 160)}")
    print("\n== answers")
    for o in summary.outcomes:
        r = o.response
        verdict = "" if o.correct is None else ("  CORRECT" if o.correct else "  wrong")
        print(f"  Q: {short(o.item.question, 150)}")
        if o.item.choices:
            print("     choices: " + "; ".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(o.item.choices)))
        status = "ok" if r.success else f"FAILED code {r.error_code}: {r.message}"
        print(f"     answer: {r.answer or '-'} {('(' + r.answer_text + ')') if r.answer_text else ''}"
              f"  ground truth: {o.item.answer or '-'}{verdict}  [{status}]")
        print(f"     reasoning: {short(r.reasoning or r.raw_output, 200) or '-'}")
        print(f"     latency: perception wait {r.perception_s:.2f}s, reasoning {r.reasoning_s:.2f}s, "
              f"total {r.total_s:.2f}s, key frames used {r.keyframes_used}")
    acc = summary.accuracy_by_category()
    if acc:
        print("\n== accuracy (%): " + ", ".join(f"{k} {v:.0f}" for k, v in acc.items()))
    if tiny:
        print("   (tiny random models: these numbers say nothing about the method)")


def run(args: argparse.Namespace, report_path: Path) -> tuple[Any, bool]:
    """Start the graph, replay, ask, print; returns (summary, tiny models used)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from embodied_r_ros.graph_processes import GraphProcesses
    from embodied_r_ros.replay import SpinningClient, ask_all, load_questions

    args.artifacts.mkdir(parents=True, exist_ok=True)
    if args.bag is None or args.questions is None:
        sample_bag, sample_questions = ensure_sample(args.artifacts)
    bag = args.bag or sample_bag
    questions = load_questions(args.questions or sample_questions)
    overrides, tiny = resolve_models(args)
    params = cfg.load_parameters(args.params_file, overrides=overrides)

    print(f"== starting the {args.graph} graph with {args.params_file}")
    t0 = time.monotonic()
    with GraphProcesses(args.graph, args.params_file, overrides,
                        echo=None if args.quiet_nodes else sys.stdout) as graph, \
            SpinningClient(camera_topic=params["camera.topic"],
                           ask_service=params["services.ask"],
                           keyframes_topic=params["topics.keyframes"],
                           descriptions_topic=params["topics.descriptions"],
                           answers_topic=params["topics.answers"],
                           odometry_topic=params["perception.odometry_topic"]) as client:
        client.wait_for_graph(args.startup_timeout, alive_check=graph.check_alive)
        poses = (read_poses(bag, params["perception.odometry_topic"])
                 if params["perception.use_odometry"] else [])
        print(f"== graph up in {time.monotonic() - t0:.1f}s; replaying {bag} at {args.rate}x "
              f"({len(poses)} odometry poses)")
        n = client.play(read_frames(bag), rate=args.rate, poses=poses)
        print(f"== published {n} frames; asking {len(questions)} questions")
        summary = ask_all(client, questions, timeout_s=args.timeout)
        time.sleep(0.5)  # let the last descriptions/answers arrive
        graph.check_alive()
        print_report(client, summary, tiny)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps({"tiny_models": tiny, "bag": str(bag),
                                       **summary.to_json()}, indent=2))
    print(f"\n== report written to {report_path}")
    return summary, tiny


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    summary, _tiny = run(args, args.artifacts / "demo_report.json")
    # Tiny random models cannot be expected to produce an option letter (code 9); any
    # other failure means the pipeline is broken.
    ok = all(o.response.success or o.response.error_code == 9 for o in summary.outcomes)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

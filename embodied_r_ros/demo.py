"""`embodied-r demo`: the whole node graph on the bundled synthetic sample.

Steps: make the sample (synthetic egocentric clip as a rosbag2 MCAP file + questions)
and, when no models are configured, the tiny models; start the graph (one embedded
process by default, or the three split nodes); replay the bag onto the camera topic; ask
every sample question through the AskSpatial service; print the key frames, each frame's
description, each answer with its reasoning, and the per-stage latency. The replay and
the questions are one live replay evaluation (`embodied_r_ros.evaluation.live`), the
same that `embodied-r replay-eval --mode live` runs.

With real models configured (--perception-model / --reasoning-model, or in the
parameter file) those are used. Without, the mini-world models shipped in the package
(trained on synthetic rooms, docs/mini_world.md) answer questions about a held-out room
of that world, and the demo prints their accuracy against the ground truth beside chance.
`--tiny-models` uses tiny random models instead (text is noise: plumbing only), on the
classic sample clip.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from embodied_r_ros.core.append_only import write_json_atomic
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.core.settings import LOSSLESS_CAMERA, LOSSLESS_DEPTH, load_settings
from embodied_r_ros.evaluation import models as model_setup
from embodied_r_ros.evaluation.episode import EpisodeRecord
from embodied_r_ros.evaluation.results import QuestionResult, summarize

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PARAMS = REPO_ROOT / "config" / "embodied_r.yaml"
DEFAULT_ARTIFACTS = REPO_ROOT / "artifacts"


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
    parser.add_argument("--camera-qos", choices=["reliable", "best_effort"], default="reliable",
                        help="reliable (default): every frame of the bag reaches the graph "
                             f"(camera.reliability reliable, camera.depth {LOSSLESS_DEPTH}), so "
                             "the key frames are those of `replay-eval --mode fast`; "
                             "best_effort: the parameter file's camera QoS, as a robot's "
                             "camera is received (frames can be lost while the node is busy)")
    parser.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS,
                        help="where the sample, tiny models and the report are written")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per question")
    parser.add_argument("--startup-timeout", type=float, default=180.0,
                        help="seconds to wait for the nodes to load their models")
    parser.add_argument("--quiet-nodes", action="store_true", help="do not echo node logs")
    parser.add_argument("--tiny-models", action="store_true",
                        help="fill in missing models with tiny random ones (plumbing only) instead of "
                             "the shipped mini-world models")
    return parser.parse_args(argv)


# The held-out room of the mini world that the demo replays with the mini-world models.
WORLD_SAMPLE_ROOM = 0  # index among the world's test rooms


def ensure_world_sample(artifacts: Path) -> tuple[Path, Path]:
    """A held-out (test) room of the mini world as a bag + questions, made once."""
    from embodied_r_ros.sample_data.world import WorldConfig, write_room_sample

    out = artifacts / "world_sample"
    bag, questions = out / "sample.mcap", out / "questions.json"
    if not (bag.exists() and questions.exists()):
        cfg = WorldConfig()
        index = cfg.n_train + cfg.n_val + WORLD_SAMPLE_ROOM
        print(f"== making the mini-world sample (held-out room {index}) in {out}")
        write_room_sample(out, index, cfg)
    return bag, questions


def ensure_sample(artifacts: Path) -> tuple[Path, Path]:
    from embodied_r_ros.sample_data.cli import main as make_sample

    out = artifacts / "sample"
    bag, questions = out / "sample.mcap", out / "questions.json"
    if not (bag.exists() and questions.exists()):
        print(f"== making the synthetic sample in {out}")
        if make_sample([str(out)]) != 0:
            raise SystemExit("demo: making the sample failed")
    return bag, questions


def uses_mini_world(args: argparse.Namespace) -> bool:
    """Whether missing models are filled in with the shipped mini-world ones."""
    overrides = model_setup.model_overrides(args.perception_model, args.reasoning_model)
    return (not getattr(args, "tiny_models", False) and model_setup.mini_world_available()
            and bool(model_setup.missing_models(args.params_file, overrides)))


def resolve_models(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Model overrides for the graph, and whether the tiny models are in use."""
    overrides = model_setup.model_overrides(args.perception_model, args.reasoning_model)
    missing = model_setup.missing_models(args.params_file, overrides)
    if not missing:
        return overrides, False
    if uses_mini_world(args):
        print(model_setup.mini_world_banner(missing))
        return {**overrides, **model_setup.mini_world_overrides(missing)}, False
    tiny = model_setup.tiny_overrides(args.artifacts, missing)
    print(model_setup.tiny_banner(missing, tiny))
    return {**overrides, **tiny}, True


def short(text: str, width: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def print_report(episode: EpisodeRecord, results: list[QuestionResult], tiny: bool) -> None:
    print("\n== key frames chosen")
    for kf in episode.keyframes:
        print(f"  key frame {kf.index:2d}: sampled frame {kf.sampled_index:3d}, "
              f"source frame {kf.source_index:4d}, t={kf.stamp_s:6.2f}s, "
              f"{kf.reason}, overlap {kf.overlap:.2f}")
    print("\n== frame descriptions (perception)")
    for d in episode.descriptions:
        action = f"after {d.action} ({d.action_source}), " if d.action else ""
        print(f"  frame {d.index:2d} [{d.latency_s:5.2f}s] {action}observe: "
              f"{short(d.observation or d.raw_text, 160)}")
    print("\n== answers")
    for r in results:
        verdict = "" if r.correct is None else ("  CORRECT" if r.correct else "  wrong")
        print(f"  Q: {short(r.question, 150)}")
        if r.choices:
            print("     choices: " + "; ".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(r.choices)))
        status = "ok" if r.success else (f"FAILED {ErrorCode(r.error_code).name} "
                                         f"(code {r.error_code}): {short(r.message, 120)}")
        print(f"     answer: {r.answer or '-'} {('(' + r.answer_text + ')') if r.answer_text else ''}"
              f"  ground truth: {r.ground_truth or '-'}{verdict}  [{status}]")
        print(f"     reasoning: {short(r.reasoning or r.raw_output, 200) or '-'}")
        print(f"     latency: perception wait {r.perception_s:.2f}s, reasoning {r.reasoning_s:.2f}s, "
              f"total {r.total_s:.2f}s, key frames used {r.keyframes_used}")
    acc = summarize(results)["accuracy"]
    if acc:
        print("\n== accuracy (%): " + ", ".join(f"{k} {v:.0f}" for k, v in acc.items()))
    if tiny:
        print("   (tiny random models: these numbers say nothing about the method)")
    line = accuracy_vs_chance(results)
    if line:
        print("== " + line)


def accuracy_vs_chance(results: list[QuestionResult]) -> str:
    """"answered right k of n (x%); chance y%" over the graded questions, or ""."""
    graded = [r for r in results if r.correct is not None]
    if not graded:
        return ""
    right = sum(bool(r.correct) for r in graded)
    chance = sum(1.0 / max(len(r.choices), 1) for r in graded) / len(graded)
    return (f"answered right {right} of {len(graded)} questions ({100.0 * right / len(graded):.0f}%); "
            f"chance {100.0 * chance:.0f}% (one random guess among each question's choices)")


def run(args: argparse.Namespace, report_path: Path) -> tuple[list[QuestionResult], bool]:
    """Start the graph, replay, ask, print; returns (results, tiny models used)."""
    from embodied_r_ros.evaluation.live import LiveReplay
    from embodied_r_ros.evaluation.questions import load_questions

    args.artifacts.mkdir(parents=True, exist_ok=True)
    if args.bag is None or args.questions is None:
        make = ensure_world_sample if uses_mini_world(args) else ensure_sample
        sample_bag, sample_questions = make(args.artifacts)
    bag = Path(args.bag or sample_bag)
    items = load_questions(args.questions or sample_questions)
    overrides, tiny = resolve_models(args)
    if tiny:  # local folders only: never ask the hub (the nodes inherit this)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.camera_qos == "reliable":
        overrides.update(LOSSLESS_CAMERA)
    settings = load_settings(args.params_file, overrides=overrides)

    print(f"== starting the {args.graph} graph with {args.params_file}")
    t0 = time.monotonic()
    results: list[QuestionResult] = []
    with LiveReplay(settings, args.params_file, overrides, graph=args.graph, rate=args.rate,
                    startup_timeout_s=args.startup_timeout,
                    echo=None if args.quiet_nodes else sys.stdout) as live:
        print(f"== graph up in {time.monotonic() - t0:.1f}s; replaying {bag} at {args.rate}x, "
              f"then asking {len(items)} questions")
        episode = live.run_bag(bag.name, bag, items, timeout_s=args.timeout,
                               on_result=results.append)
        print(f"== published {episode.frames_published} frames, the graph received "
              f"{episode.frames_received}")
        print_report(episode, results, tiny)
    summary = summarize(results)
    write_json_atomic(report_path, {"tiny_models": tiny, "bag": str(bag),
                                    "accuracy_vs_chance": accuracy_vs_chance(results),
                                    "accuracy": summary["accuracy"], "latency": summary["latency"],
                                    "latency_per_stage": summary["latency_per_stage"],
                                    "questions": summary["results"],
                                    "episode": episode.to_json()})
    print(f"\n== report written to {report_path}")
    print(next_steps(args, bag, tiny, results))
    return results, tiny


def next_steps(args: argparse.Namespace, bag: Path, tiny: bool,
               results: list[QuestionResult]) -> str:
    """The demo's last words: why the answers look as they do, where the pictures are, and
    the commands to try next."""
    lines = []
    bag = _shown(bag)
    if tiny:
        unparseable = sum(r.error_code == ErrorCode.UNPARSEABLE_ANSWER for r in results)
        lines += ["",
                  f"== why the answers are noise: the models are tiny and random ({unparseable} "
                  f"of {len(results)} answers had no option letter, UNPARSEABLE_ANSWER), so "
                  "they only show that frames, key frames, descriptions and questions flow "
                  "through the graph. For real answers configure a VLM and the reasoning LM "
                  "(--perception-model / --reasoning-model, or a models setup: "
                  "config/models/my_models.example.yaml); docs/answers.md shows a good answer "
                  "record field by field."]
        lines[-1] = textwrap.fill(lines[-1], width=88, subsequent_indent="   ")
    preview = bag.parent / "preview.png"
    if preview.is_file():
        lines += [f"== a contact sheet of the sample clip: {preview}"]
    art = args.artifacts
    if not tiny:
        models = (f"perception_model:={args.perception_model or 'VLM'} "
                  f"reasoning_model:={args.reasoning_model or 'LM'}")
    elif art.resolve() == DEFAULT_ARTIFACTS.resolve():
        models = "models:=tiny_cpu"
    else:  # explicit model arguments win over the setup's relative paths
        models = (f"models:=tiny_cpu perception_model:={art / 'tiny_models' / 'vlm'} "
                  f"reasoning_model:={art / 'tiny_models' / 'lm'}")
    example = min((r for r in results if r.choices), default=None,
                  key=lambda r: len(r.question) + sum(map(len, r.choices)))
    ask = ('embodied-r ask "What did I see first?"' if example is None else
           f"embodied-r ask {shlex.quote(example.question.splitlines()[0].removeprefix('Question: '))} "
           + " ".join(f"--choice {shlex.quote(c)}" for c in example.choices))
    eval_models = "--tiny-models" if tiny else (
        f"--perception-model {args.perception_model or 'VLM'} "
        f"--reasoning-model {args.reasoning_model or 'LM'}")
    lines += ["== next, from the repository root after `source scripts/env.sh`:",
              f"   embodied-r launch {models}          # the graph (shell 1; Ctrl-C stops it)",
              f"   embodied-r play {bag}                # feed it the sample (shell 2)",
              f"   {ask}",
              f"   embodied-r replay-eval --bag {bag} --questions {bag.parent / 'questions.json'} "
              f"--mode fast {eval_models} --out results/sample.json   # accuracy, latency, plot",
              "   (every command and its output: docs/cli.md)"]
    return "\n".join(lines)


def _shown(path: Path) -> Path:
    """A path as a user would type it: relative to the current folder when inside it."""
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd())) if path.resolve().is_relative_to(
            Path.cwd()) else path
    except ValueError:
        return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    results, _tiny = run(args, args.artifacts / "demo_report.json")
    # Tiny random models cannot be expected to produce an option letter (UNPARSEABLE_ANSWER);
    # any other failure means the pipeline is broken.
    ok = all(r.success or r.error_code == ErrorCode.UNPARSEABLE_ANSWER for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

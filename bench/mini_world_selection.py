"""Model selection for the mini world: score a reasoning model on two sets that are
neither test nor training rooms of the reasoning model, so recipes can be compared
without looking at the test rooms.

- S1: every question of the caption rooms of a run's world (rooms the perception model
  was trained on, which the reasoning model never saw).
- S2: every question of the training split of a second world drawn with another seed.

Both are described once by the perception model (streaming key frames, odometry motion,
as `embodied-r-train mini-world` caches its splits) and scored greedily with no judge:
accuracy overall and per kind, and how often the letter is the option the reasoning
names (`follows_reasoning`).

    python -m bench.mini_world_selection sets --run artifacts/mini_world --out artifacts/selection
    python -m bench.mini_world_selection score --sets artifacts/selection --name shipped \\
        --model embodied_r_ros/sample_data/models/mini_world_lm
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SETS = ("s1", "s2")


def _run_settings(run: Path, args: argparse.Namespace) -> dict[str, int]:
    """The room counts of the run: its results.json settings when it finished, else the
    options (whose defaults are the run's)."""
    keys = ("seed", "warmup_rooms", "grpo_rooms", "caption_rooms")
    results = run / "results.json"
    if results.exists():
        settings = json.loads(results.read_text())["settings"]
        return {k: int(settings[k]) for k in keys}
    return {k: int(getattr(args, k)) for k in keys}


def _cache(out: Path, records: list[dict[str, Any]], world: Path, vlm: Path) -> int:
    from embodied_r_ros.core.backends.factory import make_perceiver
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_ros.core.keyframes.rules import KeyFrameParams
    from embodied_r_training.mini_world import run as mw
    from embodied_r_training.perception_cache import cache_split

    spec = ModelSpec.from_dict(mw._spec(vlm, mw.PERCEPTION_TOKENS))
    cache_split(records, perceiver=lambda: make_perceiver(spec), out=out, split="sel", mode="streaming",
                keyframe_params=KeyFrameParams(**mw.KEYFRAMES), batch_size=8, workers=1,
                motion=mw.odometry_motion(world))
    return len(records)


def make_sets(args: argparse.Namespace) -> None:
    from embodied_r_ros.sample_data.world import WorldConfig, write_world
    from embodied_r_training.data import read_jsonl
    from embodied_r_training.mini_world import run as mw

    run, out = Path(args.run), Path(args.out)
    summary_path = run / "world" / "world.json"
    if not summary_path.exists() or not (run / "prepared" / "train.jsonl").exists():
        raise SystemExit(f"{run}: no world/world.json and prepared/train.jsonl; give --run the folder of an "
                         "`embodied-r-train mini-world` run that got past its world and prepare steps")
    s = _run_settings(run, args)
    roles = mw.room_roles(json.loads(summary_path.read_text()), s["seed"], s["warmup_rooms"], s["grpo_rooms"],
                          s["caption_rooms"])
    captions = set(roles["captions"])
    s1 = [r for r in read_jsonl(run / "prepared" / "train.jsonl") if r["scene_name"] in captions]
    world2, prepared2 = out / "world_s2", out / "prepared_s2"
    if not (world2 / "world.json").exists():
        write_world(world2, WorldConfig(seed=args.second_seed, n_train=args.second_world_rooms, n_val=1, n_test=1))
    if not (prepared2 / "train.jsonl").exists():
        mw.prepare_world(world2, prepared2)
    s2 = read_jsonl(prepared2 / "train.jsonl")
    for name, records, world in (("s1", s1, run / "world"), ("s2", s2, world2)):
        target = out / f"cache_{name}"
        if not (target / "sel.streaming.jsonl").exists():
            _cache(target, records, world, Path(args.vlm))
        print(f"{name}: {len(records)} questions of {len({r['scene_name'] for r in records})} rooms "
              f"-> {target / 'sel.streaming.jsonl'}", flush=True)


def score(args: argparse.Namespace) -> dict[str, Any]:
    from embodied_r_training.data import read_jsonl
    from embodied_r_training.mini_world import run as mw

    sets, model = Path(args.sets), Path(args.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"--model {model}: no config.json there; give a reasoning model's folder")
    rows: dict[str, Any] = {}
    for name in SETS:
        path = sets / f"cache_{name}" / "sel.streaming.jsonl"
        if not path.exists():
            raise SystemExit(f"{path} is missing: make the sets first "
                             f"(python -m bench.mini_world_selection sets --run RUN --out {sets})")
        records = read_jsonl(path)
        row = mw.evaluate_row(args.name, model, records, sets / "scores" / args.name / name, judge=None)
        rows[name] = row
        kinds = " ".join(f"{k}={v:.1f}" for k, v in sorted(row["per_category"].items()))
        follows = row.get("follows_reasoning")
        print(f"{args.name} {name}: n={row['n']} accuracy {row['overall']:.1f}% "
              f"follows_reasoning {'n/a' if follows is None else f'{follows:.1f}%'} "
              f"well_formed {row['well_formed']:.1f}% | {kinds}", flush=True)
    (sets / "scores" / args.name / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def build_parser() -> argparse.ArgumentParser:
    from embodied_r_training.mini_world import run as mw

    defaults = mw.build_parser().parse_args(["--out", "unused"])
    p = argparse.ArgumentParser(prog="python -m bench.mini_world_selection", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sets", help="describe S1 and S2 with the perception model (once)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s.add_argument("--run", required=True, help="folder of an `embodied-r-train mini-world` run (its world)")
    s.add_argument("--out", required=True, help="folder of the sets (and later their scores)")
    s.add_argument("--vlm", default=str(mw.SHIP_DIR / "mini_world_vlm"), help="perception model describing them")
    s.add_argument("--second-seed", type=int, default=1, help="seed of S2's world")
    s.add_argument("--second-world-rooms", type=int, default=defaults.caption_rooms, help="rooms of S2's world")
    for name in ("seed", "warmup_rooms", "grpo_rooms", "caption_rooms"):
        s.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name),
                       help=f"the run's --{name.replace('_', '-')} (read from its results.json when it has one)")
    c = sub.add_parser("score", help="score one reasoning model on both sets",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    c.add_argument("--sets", required=True, help="the folder `sets --out` wrote")
    c.add_argument("--name", required=True, help="a label; scores go to SETS/scores/NAME/")
    c.add_argument("--model", required=True, help="the reasoning model's folder")
    return p


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(1)  # as the mini-world run trains and evaluates
    args = build_parser().parse_args(argv)
    if args.command == "sets":
        make_sets(args)
    else:
        score(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

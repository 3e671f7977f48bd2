"""`embodied-r replay-eval`: evaluate the robot pipeline by replaying a rosbag.

    embodied-r replay-eval --bag run1.mcap --questions run1_questions.json \
        --perception-model /models/qwen2.5-vl-7b --reasoning-model /models/embodied-r \
        --out results/run1.json

Replays the bag's camera topic (sensor_msgs/Image or CompressedImage; sqlite3 or MCAP)
through the same node graph the robot runs, asks every question through the AskSpatial
service, and writes per-question results, per-category accuracy and latency as JSON
(--out) and a markdown table beside it. Question files: a JSON list of records, either
{"question_text", "choices", "answer", "question_category"} or the datasets' own format
({"question" with a "Choices:" block, "answer", "question_category"}).
"""

from __future__ import annotations

import sys
from pathlib import Path

from embodied_r_ros.demo import parse_args, run


def markdown(summary) -> str:  # type: ignore[no-untyped-def]
    acc = summary.accuracy_by_category()
    lat = summary.latency()
    lines = ["| category | accuracy % |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in acc.items()]
    lines += ["", "| latency | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in lat.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Path("replay_eval.json")
    if "--out" in argv:
        i = argv.index("--out")
        if i + 1 >= len(argv):
            print("replay-eval: --out needs a path", file=sys.stderr)
            return 2
        out = Path(argv[i + 1])
        del argv[i:i + 2]
    args = parse_args(argv)
    if args.bag is None or args.questions is None:
        print("replay-eval: --bag and --questions are required (the demo uses the sample)",
              file=sys.stderr)
        return 2
    summary, _tiny = run(args, out)
    out.with_suffix(".md").write_text(markdown(summary))
    print(f"== markdown table written to {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

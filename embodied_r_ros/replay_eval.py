"""`embodied-r replay-eval`: evaluate the robot pipeline by replaying rosbags.

The command lives in `embodied_r_ros.evaluation.run` (its docstring and `--help` give
the options; `embodied_r_ros.evaluation.questions` the question-file format and
`embodied_r_ros.evaluation.results` the output files).
"""

from __future__ import annotations

from embodied_r_ros.evaluation.run import build_parser, evaluate, main

__all__ = ["build_parser", "evaluate", "main"]

if __name__ == "__main__":
    raise SystemExit(main())

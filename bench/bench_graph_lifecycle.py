"""Benchmark: what one start and stop of the node graph costs, with tiny models on the CPU.

Starts the installed graph (embedded or split, as `embodied-r launch` does), waits until it
serves questions and subscribes to the camera, lets every node settle, then stops it
(SIGINT, as Ctrl-C). Prints, per graph and round: the CPU seconds of all its node
processes together (user + system, from start to exit), the wall time to serving, and the
wall time from the stop signal until the last node has exited. The test suite starts
dozens of graphs, so these figures are most of its cost; a robot pays them at every
restart.

    python -m bench.bench_graph_lifecycle                       # both graphs, 2 rounds
    python -m bench.bench_graph_lifecycle --graphs embedded --rounds 1

To compare two versions, run it on each in the same session on the same machine (it
reports absolute figures; the machine's load changes them). The tiny models are built into
--artifacts on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from embodied_r_ros.evaluation.models import tiny_overrides
from embodied_r_ros.evaluation.run import DEFAULT_ARTIFACTS, DEFAULT_PARAMS
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.replay import SpinningClient


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_round(graph: str, overrides: dict, settle_s: float) -> dict[str, float]:
    """Start `graph`, wait until it serves, settle, stop; the round's figures."""
    cpu0, t0 = _children_cpu_s(), time.monotonic()
    with GraphProcesses(graph, DEFAULT_PARAMS, overrides, echo=None) as running:
        with SpinningClient() as client:
            client.wait_for_graph(240, alive_check=running.check_alive)
            up_s = time.monotonic() - t0
            time.sleep(settle_s)  # every node active (the graph serves before all are)
            running.check_alive()
        stop0 = time.monotonic()
    stop_s = time.monotonic() - stop0
    codes = [node.process.returncode for node in running.nodes]
    if any(code != 0 for code in codes):
        raise SystemExit(f"{graph}: a node exited with {codes}:\n{running.output()[-3000:]}")
    return {"cpu_s": _children_cpu_s() - cpu0, "up_s": up_s, "stop_s": stop_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", choices=["embedded", "split"],
                        default=["embedded", "split"], help="graphs to start (default: both)")
    parser.add_argument("--rounds", type=int, default=2, help="starts per graph (default 2)")
    parser.add_argument("--settle", type=float, default=6.0,
                        help="seconds the graph runs after it serves, before the stop (default 6)")
    parser.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS,
                        help="where the tiny models are built (default artifacts/)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only (the nodes inherit it)
    overrides = tiny_overrides(args.artifacts)
    results: dict[str, list[dict[str, float]]] = {}
    print("graph     round  CPU s (all nodes)  up s  stop s", flush=True)
    for round_no in range(1, args.rounds + 1):
        for graph in args.graphs:
            figures = one_round(graph, overrides, args.settle)
            results.setdefault(graph, []).append(figures)
            print(f"{graph:9s} {round_no:5d}  {figures['cpu_s']:17.1f}  {figures['up_s']:4.1f}  "
                  f"{figures['stop_s']:6.1f}", flush=True)
    for graph, rows in results.items():
        print(f"{graph}: median CPU {statistics.median(r['cpu_s'] for r in rows):.1f} s, "
              f"stop {statistics.median(r['stop_s'] for r in rows):.1f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

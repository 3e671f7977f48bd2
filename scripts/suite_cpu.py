"""Where the test suite's CPU time goes, process by process.

    python scripts/suite_cpu.py [--out FILE] PYTEST_ARGUMENTS...

Runs `python -m pytest` with the given arguments (the suite as `make test` runs it on two
cores: `test -n 2 --dist loadfile`) and, in every Python process started under it (pytest and its xdist workers, the
node executables, the CLI commands, training jobs), records at exit the process's CPU time
(user + system), its command and whether it imported torch and transformers. Then prints
one row per program: processes, CPU seconds, share of the reported CPU, processes that
loaded transformers. A process killed with SIGKILL (the tests kill nodes on purpose) does
not get to report; the last line says how much CPU the suite used that no process
reported. The records are kept in FILE (JSON lines; default build/suite_cpu.jsonl).

It works through a `sitecustomize` module put first on PYTHONPATH for the run only;
nothing in the package changes. Exit status is pytest's.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "build" / "suite_cpu.jsonl"

# Written into a temporary folder; Python imports it at start-up in every process that
# inherits PYTHONPATH. It must never raise: a failure to report loses one row, not a test.
SITECUSTOMIZE = '''
import atexit as _atexit, os as _os, sys as _sys

def _suite_cpu_report(path=_os.environ.get("SUITE_CPU_RECORDS", "")):
    try:
        import json
        times = _os.times()
        row = {"pid": _os.getpid(), "argv": _sys.argv[:3], "cpu_s": round(times.user + times.system, 3),
               "transformers": "transformers" in _sys.modules, "torch": "torch" in _sys.modules,
               "test": _os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\\n")
    except Exception:
        pass

if _os.environ.get("SUITE_CPU_RECORDS"):
    _atexit.register(_suite_cpu_report)
'''


def program(argv: list[str]) -> str:
    """A short name for what a process ran: `-m module`, a script's or executable's name."""
    if not argv or argv[0] in ("", "-c"):
        return "python -c"
    name = Path(argv[0]).name
    if name == "__main__.py":  # `python -m pkg` reports the package's __main__.py
        return f"-m {Path(argv[0]).parent.name}"
    if name in ("embodied-r", "embodied-r-train") and len(argv) > 1:
        return f"{name} {argv[1]}"
    return name


def summarize(rows: list[dict], children_cpu_s: float) -> list[str]:
    """The table's lines, programs by CPU, and the unreported remainder."""
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for row in rows:
        groups[program(row["argv"])].append(row)
    reported = sum(r["cpu_s"] for r in rows)
    lines = [f"{'CPU s':>8} {'share':>6} {'procs':>5} {'with transformers':>17}  program"]
    for name, members in sorted(groups.items(), key=lambda kv: -sum(r["cpu_s"] for r in kv[1])):
        cpu = sum(r["cpu_s"] for r in members)
        share = 100.0 * cpu / reported if reported else 0.0
        loaded = sum(1 for r in members if r["transformers"])
        lines.append(f"{cpu:8.1f} {share:5.1f}% {len(members):5d} {loaded:17d}  {name}")
    lines.append(f"{reported:8.1f} reported by {len(rows)} processes")
    missing = max(0.0, children_cpu_s - reported)
    lines.append(f"{missing:8.1f} used by processes that did not report (killed before exit, or not Python)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON lines, one per process")
    args, pytest_args = parser.parse_known_args(argv)
    if not pytest_args:
        parser.error("give pytest's arguments, e.g. `test -n 2 --dist loadfile` (make test's, on 2 cores)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="suite_cpu_") as hook_dir:
        (Path(hook_dir) / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        env = dict(os.environ, SUITE_CPU_RECORDS=str(args.out))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, os.environ.get("PYTHONPATH", "")) if p)
        started = time.monotonic()
        rc = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=REPO, env=env)
        wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = [json.loads(line) for line in args.out.read_text(encoding="utf-8").splitlines()] \
        if args.out.is_file() else []
    print(f"\nsuite_cpu: pytest exit {rc}, {wall:.0f} s wall, "
          f"{usage.ru_utime + usage.ru_stime:.0f} CPU s in all ({os.cpu_count()} cores); records: {args.out}")
    print("\n".join(summarize(rows, usage.ru_utime + usage.ru_stime)))
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""scripts/suite_cpu.py: a pytest run under it reports the CPU time of every Python process
it started, grouped by program, and keeps pytest's exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.env import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "suite_cpu.py"

SPINNING_CHILD = '''
import subprocess, sys

def test_child_burns_cpu():
    code = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

def test_fails():
    assert {fail}
'''


def run(tmp_path: Path, fail: bool) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    test_file = tmp_path / "test_spin.py"
    test_file.write_text(SPINNING_CHILD.format(fail=not fail))
    out = tmp_path / "records.jsonl"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), str(test_file), "-q",
                           "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=300)
    return done, [json.loads(line) for line in out.read_text().splitlines()]


def test_every_process_reports_and_the_table_groups_them(tmp_path: Path) -> None:
    done, rows = run(tmp_path, fail=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    children = [r for r in rows if r["argv"][:1] == ["-c"]]
    assert len(children) == 1 and children[0]["cpu_s"] >= 0.4  # the child's half second of CPU
    assert children[0]["test"].endswith("test_spin.py::test_child_burns_cpu")
    assert any(r["argv"][0].endswith("pytest/__main__.py") for r in rows)  # pytest itself
    table = done.stdout.split("suite_cpu: pytest exit 0", 1)[1]
    assert "python -c" in table and "-m pytest" in table
    assert f"reported by {len(rows)} processes" in table


def test_pytest_failure_is_the_exit_status(tmp_path: Path) -> None:
    done, rows = run(tmp_path, fail=True)
    assert done.returncode == 1 and "suite_cpu: pytest exit 1" in done.stdout
    assert rows


def test_no_pytest_arguments_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "test -n 2 --dist loadfile" in done.stderr

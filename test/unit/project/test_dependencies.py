"""One list of dependencies: setup.py's install_requires and extras are the files in
requirements/, every group CI installs is pinned in constraints.txt, and every third-party
module the package imports comes from a declared group."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import runpy
import sys
from pathlib import Path

import setuptools

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
REQ = REPO / "requirements"
NOT_INSTALLED_HERE = {"vllm", "deepspeed"}  # GPU-only extras


def names(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return out


def setup_kwargs(monkeypatch) -> dict:  # type: ignore[no-untyped-def]
    captured: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(REPO)
    runpy.run_path(str(REPO / "setup.py"), run_name="not_main")
    return captured


def test_setup_py_reads_the_requirement_files(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    kw = setup_kwargs(monkeypatch)
    flat = lambda reqs: sorted(r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].lower()  # noqa: E731
                               for r in reqs)
    assert flat(kw["install_requires"]) == sorted(names(REQ / "core.txt"))
    assert flat(kw["extras_require"]["models"]) == sorted(names(REQ / "models.txt"))
    assert set(flat(kw["extras_require"]["train"])) == set(names(REQ / "models.txt") + names(REQ / "train.txt"))
    assert set(flat(kw["extras_require"]["test"])) == set(names(REQ / "test.txt") + names(REQ / "bags.txt"))


def test_every_installed_group_is_pinned() -> None:
    pinned = {line.split("==")[0].lower().replace("_", "-")
              for line in (REQ / "constraints.txt").read_text().splitlines() if "==" in line}
    for path in REQ.glob("*.txt"):
        if path.name == "constraints.txt":
            continue
        for name in names(path):
            if name not in NOT_INSTALLED_HERE:
                assert name in pinned, f"{name} ({path.name}) has no pin in constraints.txt"


def third_party_imports() -> set[str]:
    found: set[str] = set()
    for root in (REPO / "embodied_r_ros", REPO / "training"):
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    local = {"embodied_r_ros", "embodied_r_training", "launch", "launch_ros", "cv_bridge"}
    return {m for m in found if m not in local and m not in sys.stdlib_module_names}


def test_every_imported_module_comes_from_a_declared_group() -> None:
    declared = set()
    for path in REQ.glob("*.txt"):
        if path.name != "constraints.txt":
            declared.update(names(path))
    providers = md.packages_distributions()
    missing = []
    for module in sorted(third_party_imports()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if module in NOT_INSTALLED_HERE:
            continue
        # ROS interface packages come with the ros-* wheels (requirements/ros.txt) or apt.
        ros = {f"ros-{module.replace('_', '-')}"} & declared
        if not (dists & declared) and not ros and not _required_by_declared(dists, declared):
            missing.append(f"{module} (from {sorted(dists) or 'nothing installed'})")
    assert not missing, "imported but not declared in requirements/: " + ", ".join(missing)


def _required_by_declared(dists: set[str], declared: set[str]) -> bool:
    """A module of a distribution that a declared ROS wheel pulls in (e.g. rclpy's
    rcl_interfaces, builtin_interfaces): accepted for the ros-* group only."""
    return any(d.startswith("ros-") for d in dists) and any(d.startswith("ros-") for d in declared)

"""Typed settings: built once from the parameter table, the only way code reads parameters."""

from __future__ import annotations

import re
import subprocess

import pytest

from embodied_r_ros.core import parameters as cfg
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.settings import build_settings, load_settings, setting_names

from helpers.env import REPO_ROOT


def test_settings_hold_exactly_the_table_parameters() -> None:
    names = setting_names()
    assert len(names) == len(set(names))
    assert set(names) == {p.name for p in cfg.PARAMETERS}


def test_every_value_reaches_its_field_with_its_type() -> None:
    settings = build_settings()
    for spec in cfg.PARAMETERS:
        group, _, field = spec.name.rpartition(".")
        value = getattr(getattr(settings, group), field) if group else getattr(settings, field)
        assert value == spec.default and type(value) is type(spec.default), spec.name


def test_values_are_checked_like_the_table_checks_them() -> None:
    assert build_settings({"keyframes.overlap_threshold": 1}).keyframes.overlap_threshold == 1.0
    with pytest.raises(ConfigError, match="camera.depth"):
        build_settings({"camera.depth": 0})
    with pytest.raises(ConfigError, match="unknown parameter"):
        build_settings({"perception.modle": "x"})


def test_with_values_and_as_params_round_trip() -> None:
    settings = build_settings({"qa.max_waiting_questions": 9})
    changed = settings.with_values({"perception.mode": "on_query"})
    assert changed.perception.mode == "on_query" and changed.qa.max_waiting_questions == 9
    assert settings.perception.mode == "streaming"  # frozen: the original is unchanged
    assert build_settings(changed.as_params()) == changed


def test_episode_window_follows_the_policy() -> None:
    assert build_settings({"episode.max_keyframes": 64}).episode.window == 64
    assert build_settings({"episode.policy": "restart"}).episode.window == 0


def test_model_spec_keys_differ_by_role_only_in_the_perception_keys() -> None:
    settings = build_settings({"perception.extra_json": '{"tensor_parallel_size": 2}'})
    perception, reasoning = settings.perception.spec_dict(), settings.reasoning.spec_dict()
    assert set(perception) - set(reasoning) == {"max_image_side", "image_format",
                                                "jpeg_quality", "batch_size", "extra"}
    assert perception["extra"] == {"tensor_parallel_size": 2} and "extra" not in reasoning


def test_settings_load_from_the_shipped_parameter_file() -> None:
    settings = load_settings(REPO_ROOT / "config" / "embodied_r.yaml")
    assert settings == build_settings()


def test_no_code_looks_parameters_up_by_dotted_name() -> None:
    """Outside the table and the settings builder, parameters are read as typed fields."""
    tracked = subprocess.run(["git", "ls-files", "embodied_r_ros", "training", "bench"],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    allowed = {"embodied_r_ros/core/parameters.py", "embodied_r_ros/core/settings.py"}
    lookup = re.compile(r"""\w(\[|\.get\()f?["'][a-z_]+\.[a-z_]+["']""")
    offenders = []
    for name in tracked.stdout.split():
        if not name.endswith(".py") or name in allowed:
            continue
        for number, line in enumerate((REPO_ROOT / name).read_text().splitlines(), 1):
            if lookup.search(line) and ("params" in line or "settings" in line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)

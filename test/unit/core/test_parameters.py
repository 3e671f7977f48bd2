"""The parameter table, the YAML file and their validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from embodied_r_ros.core import parameters as cfg
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.settings import build_settings

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
YAML = REPO / "config" / "embodied_r.yaml"


def test_yaml_sets_exactly_the_declared_parameters_with_their_defaults() -> None:
    doc = yaml.safe_load(YAML.read_text())
    flat = cfg._flatten(doc["/**"]["ros__parameters"])
    assert set(flat) == {p.name for p in cfg.PARAMETERS}
    for name, value in flat.items():
        assert value == cfg.PARAMS_BY_NAME[name].default, name


def test_every_parameter_has_a_description_and_sane_default() -> None:
    for spec in cfg.PARAMETERS:
        assert len(spec.description) > 20, spec.name
        if spec.choices:
            assert spec.default in spec.choices, spec.name
        if spec.minimum is not None:
            assert spec.default >= spec.minimum, spec.name
    assert cfg.defaults()["keyframes.overlap_threshold"] == 0.5
    assert cfg.defaults()["keyframes.max_keyframes"] == 32


def test_node_section_and_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "/**": {"ros__parameters": {"keyframes": {"min_keyframes": 3}, "perception": {
            "model": "all"}}},
        "/reasoning": {"ros__parameters": {"perception": {"model": "node"}}},
    }))
    assert cfg.load_parameters(path)["perception.model"] == "all"
    assert cfg.load_parameters(path, "reasoning")["perception.model"] == "node"
    got = cfg.load_parameters(path, "reasoning", overrides={"perception.model": "cli"})
    assert got["perception.model"] == "cli"
    assert got["keyframes.min_keyframes"] == 3


@pytest.mark.parametrize("values, fragment", [
    ({"keyframes.nope": 1}, "unknown parameter 'keyframes.nope'"),
    ({"keyframes.max_keyframes": "many"}, "must be int"),
    ({"perception.mode": "sometimes"}, "must be one of streaming, on_query"),
    ({"keyframes.sample_fps": -1.0}, "must be >= 0.0"),
    ({"camera.compressed": 1}, "must be bool"),
    ({"keyframes.min_keyframes": 40}, "must not exceed"),
    ({"reasoning.extra_json": "{bad"}, "not valid JSON"),
])
def test_bad_values_name_the_parameter(values: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg.validate(values)
    assert fragment in str(info.value)


def test_missing_or_broken_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        cfg.load_parameters(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**:\n  ros__parameters: [1, 2]\n")
    with pytest.raises(ConfigError, match="ros__parameters"):
        cfg.load_parameters(bad)


def test_model_settings_feed_model_spec() -> None:
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    params = cfg.validate({"reasoning.model": "/m", "reasoning.extra_json": '{"a": 1}'})
    spec = ModelSpec.from_dict(build_settings(params).reasoning.spec_dict())
    assert spec.model == "/m" and spec.extra == {"a": 1} and spec.temperature == 0.0


def test_docs_table_lists_every_parameter() -> None:
    table = cfg.docs_table()
    for spec in cfg.PARAMETERS:
        assert f"`{spec.name}`" in table


def test_parameters_doc_is_the_rendered_table() -> None:
    """docs/parameters.md is generated from the table: every parameter, no drift in text."""
    doc = (REPO / "docs" / "parameters.md").read_text()
    for spec in cfg.PARAMETERS:
        assert f"`{spec.name}`" in doc, f"docs/parameters.md lacks {spec.name}"
    assert doc == cfg.render_docs(), (
        "regenerate with: python -m embodied_r_ros.core.parameters --write-docs")


def test_readme_links_the_parameter_reference() -> None:
    readme = (REPO / "README.md").read_text()
    assert "](docs/parameters.md)" in readme
    assert "python -m embodied_r_ros.core.parameters --write-docs" in cfg.render_docs()


def test_write_options_regenerate_both_files(tmp_path: Path) -> None:
    assert cfg.main(["--write-docs", str(tmp_path / "p.md")]) == 0
    assert (tmp_path / "p.md").read_text() == cfg.render_docs()
    assert cfg.main(["--write-yaml", str(tmp_path / "p.yaml")]) == 0
    assert (tmp_path / "p.yaml").read_text() == cfg.render_yaml()
    assert cfg.main(["--bogus"]) == 2


def test_yaml_file_is_the_rendered_table() -> None:
    """config/embodied_r.yaml is generated from the table: no drift in values or text."""
    assert YAML.read_text() == cfg.render_yaml(), (
        "regenerate with: python -m embodied_r_ros.core.parameters --write-yaml")


@pytest.mark.parametrize("setup", sorted(p.stem for p in (REPO / "config" / "models").glob("*.yaml")))
def test_model_setups_are_valid_overlays(setup: str) -> None:
    path = REPO / "config" / "models" / f"{setup}.yaml"
    params = cfg.load_parameters([YAML, path])
    overlay = cfg._flatten(yaml.safe_load(path.read_text())["/**"]["ros__parameters"])
    assert overlay and all(params[k] == v for k, v in overlay.items())
    assert params["perception.model"] and params["reasoning.model"]


def test_parameter_files_apply_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"qa": {"default_timeout_s": 5.0},
                                                                  "camera": {"depth": 3}}}}))
    second.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"qa": {"default_timeout_s": 9.0}}}}))
    params = cfg.load_parameters([first, second])
    assert params["qa.default_timeout_s"] == 9.0 and params["camera.depth"] == 3

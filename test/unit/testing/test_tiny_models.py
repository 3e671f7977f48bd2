"""Tiny model builder: offline build, reuse via the manifest, loadable by the factory."""

from __future__ import annotations

import json

from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.testing.tiny_models import (
    BUILDER_VERSION,
    MANIFEST_NAME,
    TinyModelPaths,
    build_tiny_models,
    main,
)


def test_build_writes_both_models(tiny_models: TinyModelPaths) -> None:
    for folder in (tiny_models.vlm, tiny_models.lm):
        assert (folder / "config.json").is_file()
        assert (folder / "tokenizer.json").is_file()
        assert (folder / "chat_template.jinja").is_file() or "chat_template" in (
            folder / "tokenizer_config.json"
        ).read_text()
    assert (tiny_models.vlm / "processor_config.json").is_file()
    manifest = json.loads((tiny_models.vlm.parent / MANIFEST_NAME).read_text())
    assert manifest["builder_version"] == BUILDER_VERSION


def test_second_build_reuses_folder(tiny_models: TinyModelPaths) -> None:
    weights = next(tiny_models.lm.glob("*.safetensors"))
    before = weights.stat().st_mtime_ns
    again = build_tiny_models(tiny_models.lm.parent)
    assert again == tiny_models
    assert weights.stat().st_mtime_ns == before


def test_incomplete_folder_is_rebuilt(tmp_path) -> None:
    paths = build_tiny_models(tmp_path)
    next(paths.vlm.glob("*.safetensors")).unlink()
    rebuilt = build_tiny_models(tmp_path)
    assert any(rebuilt.vlm.glob("*.safetensors"))


def test_cli_builds_into_folder(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "vlm:" in out and "lm:" in out
    assert (tmp_path / "m" / "lm" / "config.json").is_file()


def test_models_load_through_factory(tiny_models: TinyModelPaths) -> None:
    perceiver = make_perceiver(ModelSpec(model=str(tiny_models.vlm), device="cpu"))
    reasoner = make_reasoner(ModelSpec(model=str(tiny_models.lm), device="cpu"))
    try:
        assert perceiver.name.startswith("transformers:")
        assert reasoner.name.startswith("transformers:")
    finally:
        perceiver.close()
        reasoner.close()

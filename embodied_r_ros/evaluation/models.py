"""Which models an evaluation or the demo runs: the configured ones, or tiny local ones.

Tiny random models (`core.tiny_models`, built locally in seconds, no download) only prove
the plumbing: their text is noise. The demo falls back to them for a model that is not
configured; `replay-eval` uses them only when asked (`--tiny-models`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from embodied_r_ros.core.settings import load_settings

# Short generations keep tiny-model runs fast; real models use the YAML values.
TINY_MAX_NEW_TOKENS = {"perception": 24, "reasoning": 48}
ROLES = ("perception", "reasoning")


def missing_models(params_file: str | Path, overrides: Mapping[str, Any]) -> list[str]:
    """The roles ("perception", "reasoning") with no model in the file or the overrides."""
    settings = load_settings(params_file)
    configured = {"perception": settings.perception.model, "reasoning": settings.reasoning.model}
    return [role for role in ROLES if not overrides.get(f"{role}.model", configured[role])]


def tiny_overrides(artifacts: str | Path, roles: list[str] | tuple[str, ...] = ROLES,
                   ) -> dict[str, Any]:
    """Parameter overrides that run `roles` on tiny local models (built on first use into
    `<artifacts>/tiny_models`): CPU, float32, greedy decoding, short generations."""
    from embodied_r_ros.testing.tiny_models import build_tiny_models

    paths = build_tiny_models(Path(artifacts) / "tiny_models")
    where = {"perception": paths.vlm, "reasoning": paths.lm}
    overrides: dict[str, Any] = {}
    for role in roles:
        overrides.update(_local_cpu_model(role, where[role], TINY_MAX_NEW_TOKENS[role]))
    return overrides


def _local_cpu_model(role: str, model: Path, max_new_tokens: int) -> dict[str, Any]:
    """Overrides that run `role` on the local model folder `model`: transformers on the
    CPU, float32, greedy decoding, at most `max_new_tokens`."""
    return {f"{role}.model": str(model), f"{role}.backend": "transformers", f"{role}.device": "cpu",
            f"{role}.dtype": "float32", f"{role}.temperature": 0.0, f"{role}.max_new_tokens": max_new_tokens}


# The mini world's trained checkpoints (training/mini_world), shipped in the package.
MINI_WORLD_DIR = Path(__file__).resolve().parents[1] / "sample_data" / "models"
MINI_WORLD_MODELS = {"perception": MINI_WORLD_DIR / "mini_world_vlm", "reasoning": MINI_WORLD_DIR / "mini_world_lm"}
# Generation lengths of the mini-world models: room for their longest training text
# (the reasoning curriculum's longest completion, a four-object appearance order, is 123
# tokens with the end token; test_mini_world_curriculum checks every kind fits).
MINI_WORLD_MAX_NEW_TOKENS = {"perception": 64, "reasoning": 128}


def mini_world_available() -> bool:
    """True when both shipped mini-world checkpoints are present."""
    return all((p / "config.json").is_file() and (p / "model.safetensors").is_file()
               for p in MINI_WORLD_MODELS.values())


def mini_world_overrides(roles: list[str] | tuple[str, ...] = ROLES) -> dict[str, Any]:
    """Parameter overrides that run `roles` on the shipped mini-world models: CPU,
    float32, greedy decoding, generations as long as their training texts. With the
    perception model, the motion between key frames comes from odometry
    (`perception.use_odometry`, the world's bags carry /odom), as in its training."""
    overrides: dict[str, Any] = {"perception.use_odometry": True} if "perception" in roles else {}
    for role in roles:
        overrides.update(_local_cpu_model(role, MINI_WORLD_MODELS[role], MINI_WORLD_MAX_NEW_TOKENS[role]))
    return overrides


def mini_world_banner(roles: list[str]) -> str:
    return textwrap.dedent(f"""
        == NO {' AND '.join(r.upper() for r in roles)} MODEL CONFIGURED: using the mini-world
           models shipped in {MINI_WORLD_DIR} (tiny Qwen2.5-VL and Qwen2 trained on CPU on
           synthetic rooms; docs/mini_world.md). They know only that world: coloured boxes,
           balls, pillars, cabinets and doors in a textured room. Pass --perception-model /
           --reasoning-model (or set them in the parameter file) to use real models.
        """)


def tiny_banner(roles: list[str], overrides: Mapping[str, Any]) -> str:
    where = ", ".join(f"{r}: {overrides[f'{r}.model']}" for r in roles)
    return textwrap.dedent(f"""
        == NO {' AND '.join(r.upper() for r in roles)} MODEL CONFIGURED: using tiny random
           models built locally ({where}).
           Their text and answers are MEANINGLESS noise; they only exercise the pipeline.
           Pass --perception-model/--reasoning-model (or set perception.model and
           reasoning.model in the parameter file) to use real models.
        """)


def model_overrides(perception_model: str = "", reasoning_model: str = "") -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if perception_model:
        overrides["perception.model"] = perception_model
    if reasoning_model:
        overrides["reasoning.model"] = reasoning_model
    return overrides


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` parameter overrides; VALUE is read as YAML (numbers, booleans)."""
    import yaml

    from embodied_r_ros.core.errors import ConfigError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set needs KEY=VALUE, got {pair!r}")
        parsed = yaml.safe_load(value) if value.strip() else ""
        out[key.strip()] = value if parsed is None else parsed
    return out

"""Training configuration files: YAML load, dotted overrides, packaged configs.

A training config has five sections (see training/configs/*.yaml)::

    model:   name_or_path, dtype, attn_implementation, trust_remote_code
    data:    train, eval (cached-record JSONL files), max_prompt_tokens, max_samples
    rewards: schedule ("paper" | "reference_code" | weights | stages),
             consistency_model (a ModelSpec mapping), consistency (reward options)
    lora:    enabled, r, lora_alpha, lora_dropout, target_modules
    grpo:    keyword arguments of trl.GRPOConfig, passed through unchanged

Relative paths inside the file are taken as relative to the current directory (run the
commands from the repository root, as the README does).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

SECTIONS = ("model", "data", "rewards", "lora", "grpo")


def packaged_config(name: str) -> Path:
    """Path of a config shipped in the package (e.g. "tiny_cpu.yaml")."""
    return Path(str(resources.files("embodied_r_training").joinpath("configs", name)))


def resolve_config_path(path: str | Path) -> Path:
    """An existing file path, or the name of a packaged config."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    packaged = packaged_config(candidate.name)
    if packaged.is_file():
        return packaged
    raise FileNotFoundError(f"config file not found: {path}")


def parse_override(text: str) -> tuple[list[str], Any]:
    """'grpo.max_steps=3' -> (['grpo', 'max_steps'], 3); the value is parsed as YAML."""
    if "=" not in text:
        raise ValueError(f"override must look like section.key=value, got {text!r}")
    key, value = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ValueError(f"empty key in override {text!r}")
    return parts, yaml.safe_load(value)


def apply_overrides(cfg: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Copy of cfg with every 'a.b.c=value' override set (creating sections as needed)."""
    out = copy.deepcopy(cfg)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return out


def read_yaml_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read any YAML config of this package (path or packaged name) and apply overrides."""
    with open(resolve_config_path(path), encoding="utf-8") as handle:
        cfg = yaml.safe_load(handle) or {}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"{path}: top level must be a mapping")
    return apply_overrides(dict(cfg), overrides)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read a YAML training config and apply overrides; unknown sections are an error."""
    cfg = read_yaml_config(path, overrides)
    unknown = sorted(set(cfg) - set(SECTIONS))
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {unknown}; allowed: {list(SECTIONS)}")
    for section in SECTIONS:
        cfg.setdefault(section, {})
        if cfg[section] is None:
            cfg[section] = {}
    return cfg

"""Typed settings: the parameter table's values as frozen dataclasses, built once.

`embodied_r_ros.core.parameters` is the single definition of every parameter (name,
default, description, checks). This module turns one validated set of those values into
`Settings`: one frozen dataclass per parameter group, whose field names are the parts of
the parameter names after the group (`qa.max_waiting_questions` ->
`settings.qa.max_waiting_questions`). Core code takes these objects; nothing outside the
table and `build_settings` looks parameters up by their dotted names. A test checks that
the groups here and the table list the same parameters, so neither can drift.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_r_ros.core import parameters
from embodied_r_ros.core.types import GenerationSettings


@dataclass(frozen=True)
class CameraSettings:
    topic: str
    compressed: bool
    reliability: str
    depth: int


# Camera queue depth of a lossless replay (the demo's, replay-eval's live mode, tests that
# count key frames): the unread frames a reliable subscription keeps, and so how far the
# replay may run ahead of the node before it waits for it (1.25 s of the sample at 4x).
LOSSLESS_DEPTH = 50
LOSSLESS_CAMERA = {"camera.reliability": "reliable", "camera.depth": LOSSLESS_DEPTH}


@dataclass(frozen=True)
class KeyFrameSettings:
    sample_fps: float
    overlap_threshold: float
    min_matches: int
    ransac_reproj_threshold: float
    min_keyframes: int
    max_keyframes: int
    ring_size: int


@dataclass(frozen=True)
class ModelSettings:
    """How one model runs (the `perception.*` / `reasoning.*` model parameters)."""

    backend: str
    model: str
    device: str
    dtype: str
    base_url: str
    api_key_env: str
    served_model_name: str
    timeout_s: float
    max_retries: int
    temperature: float
    max_new_tokens: int
    top_p: float
    kv_cache: str
    max_cache_len: int
    compile: bool
    prompt_lookup_tokens: int
    warmup: bool
    extra_json: str

    def generation(self) -> GenerationSettings:
        return GenerationSettings(temperature=self.temperature,
                                  max_new_tokens=self.max_new_tokens, top_p=self.top_p)

    def spec_dict(self) -> dict[str, Any]:
        """The `ModelSpec.from_dict` input: the model keys, plus the image keys of the
        perception model and the parsed `extra_json` when it is not empty."""
        spec = {f.name: getattr(self, f.name) for f in dataclasses.fields(ModelSettings)
                if f.name != "extra_json"}
        for key in ("max_image_side", "image_format", "jpeg_quality", "batch_size"):
            if hasattr(self, key):
                spec[key] = getattr(self, key)
        extra = json.loads(self.extra_json or "{}")  # checked by build_settings
        if extra:
            spec["extra"] = extra
        return spec


@dataclass(frozen=True)
class PerceptionSettings(ModelSettings):
    mode: str
    max_image_side: int
    max_queue: int
    batch_size: int
    image_format: str
    jpeg_quality: int
    use_odometry: bool
    odometry_topic: str


@dataclass(frozen=True)
class PromptSettings:
    file: str


@dataclass(frozen=True)
class EpisodeSettings:
    policy: str
    max_keyframes: int
    max_duration_s: float
    selection: str

    @property
    def window(self) -> int:
        """Descriptions an episode memory keeps: `max_keyframes` under the 'window'
        policy; 0 (no limit of its own) under 'restart', where the budget ends it."""
        return self.max_keyframes if self.policy == "window" else 0


@dataclass(frozen=True)
class MemoryStoreSettings:
    """The key-frame store (`memory.*`, docs/memory.md)."""

    path: str
    continue_episode: bool
    recent_keyframes: int
    embedding_model: str
    embedding_device: str
    thumbnail_px: int
    thumbnail_quality: int
    max_age_h: float
    max_mb: float
    retention_period_s: float


@dataclass(frozen=True)
class QASettings:
    default_timeout_s: float
    max_question_chars: int
    max_question_tokens: int
    max_choice_chars: int
    max_waiting_questions: int
    self_check: bool
    self_check_model: str
    include_current_view: bool


@dataclass(frozen=True)
class DiagnosticsSettings:
    period_s: float
    window_s: float
    stale_input_s: float
    drop_warn_fraction: float
    queue_warn_fraction: float
    failures_error_count: int
    memory_warn_mb: float


@dataclass(frozen=True)
class TopicSettings:
    keyframes: str
    descriptions: str
    answers: str
    episode: str


@dataclass(frozen=True)
class ServiceSettings:
    ask: str
    answer_action: str
    reset: str
    recall: str
    status: str


@dataclass(frozen=True)
class SplitSettings:
    keyframe_node: str
    perception_node: str
    peer_timeout_s: float
    keyframe_state_service: str
    described_service: str
    episodes_kept: int


@dataclass(frozen=True)
class Settings:
    """Every runtime parameter, by group (see the module docstring)."""

    autostart: bool
    camera: CameraSettings
    keyframes: KeyFrameSettings
    perception: PerceptionSettings
    reasoning: ModelSettings
    prompts: PromptSettings
    episode: EpisodeSettings
    memory: MemoryStoreSettings
    qa: QASettings
    diagnostics: DiagnosticsSettings
    topics: TopicSettings
    services: ServiceSettings
    split: SplitSettings

    def with_values(self, values: Mapping[str, Any]) -> Settings:
        """A copy with some parameters changed (dotted names), checked like the rest."""
        return build_settings({**self.as_params(), **values})

    def as_params(self) -> dict[str, Any]:
        """The flat `{dotted name: value}` form (parameter files, command lines)."""
        flat: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if dataclasses.is_dataclass(value):
                for sub in dataclasses.fields(value):
                    flat[f"{field.name}.{sub.name}"] = getattr(value, sub.name)
            else:
                flat[field.name] = value
        return flat


# Settings' groups in table order; `autostart`, the one parameter without a group, is a
# plain field of Settings.
_GROUPS: dict[str, type] = {
    "camera": CameraSettings,
    "keyframes": KeyFrameSettings,
    "perception": PerceptionSettings,
    "reasoning": ModelSettings,
    "prompts": PromptSettings,
    "episode": EpisodeSettings,
    "memory": MemoryStoreSettings,
    "qa": QASettings,
    "diagnostics": DiagnosticsSettings,
    "topics": TopicSettings,
    "services": ServiceSettings,
    "split": SplitSettings,
}
_UNGROUPED = ("autostart",)


def setting_names() -> list[str]:
    """Every dotted parameter name the settings hold (for the drift test)."""
    names = list(_UNGROUPED)
    for group, kind in _GROUPS.items():
        names += [f"{group}.{f.name}" for f in dataclasses.fields(kind)]
    return names


def load_settings(path: str | Path | Sequence[str | Path], node_name: str | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from ROS 2 parameter files (see `parameters.load_parameters`)."""
    return build_settings(parameters.load_parameters(path, node_name, overrides))


def build_settings(values: Mapping[str, Any] | None = None, *,
                   source: str = "parameters") -> Settings:
    """Validate `values` (dotted names; missing ones take their defaults) against the
    parameter table and build the typed settings; raises ConfigError with the reason."""
    flat = parameters.validate(values or {}, source=source)
    fields: dict[str, Any] = {name: flat[name] for name in _UNGROUPED}
    for group, kind in _GROUPS.items():
        fields[group] = kind(**{f.name: flat[f"{group}.{f.name}"]
                                for f in dataclasses.fields(kind)})
    return Settings(**fields)

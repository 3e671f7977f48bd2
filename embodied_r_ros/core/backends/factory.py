"""Build a Perceiver or Reasoner from a `ModelSpec`.

Backend modules are imported only when chosen, so this module imports without torch,
transformers, httpx or vllm. Any failure to find or load the model surfaces as a
ModelUnavailableError naming the model, the backend and what was tried; there is no
fallback to another backend or model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embodied_r_ros.core.backends.base import Perceiver, Reasoner
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.errors import ConfigError, EmbodiedRError, ModelUnavailableError

_PERCEIVERS = {
    "transformers": ("embodied_r_ros.core.backends.transformers_backend", "TransformersPerceiver"),
    "openai": ("embodied_r_ros.core.backends.openai_backend", "OpenAIPerceiver"),
    "vllm": ("embodied_r_ros.core.backends.vllm_backend", "VLLMPerceiver"),
}
_REASONERS = {
    "transformers": ("embodied_r_ros.core.backends.transformers_backend", "TransformersReasoner"),
    "openai": ("embodied_r_ros.core.backends.openai_backend", "OpenAIReasoner"),
    "vllm": ("embodied_r_ros.core.backends.vllm_backend", "VLLMReasoner"),
}


def _as_spec(spec: ModelSpec | Mapping[str, Any]) -> ModelSpec:
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, Mapping):
        return ModelSpec.from_dict(spec)
    raise ConfigError(f"model spec must be a ModelSpec or a mapping, got {type(spec).__name__}")


def _build(table: dict[str, tuple[str, str]], spec: ModelSpec, role: str) -> Any:
    import importlib

    if spec.backend not in table:
        raise ConfigError(f"backend: unknown backend {spec.backend!r} for the {role}")
    module_name, class_name = table[spec.backend]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelUnavailableError(
            f"model {spec.model!r} (backend {spec.backend}): the {role} backend cannot be "
            f"imported: {exc}"
        ) from exc
    try:
        return getattr(module, class_name)(spec)
    except EmbodiedRError:
        raise
    except Exception as exc:  # noqa: BLE001 - never let a raw loader error escape
        raise ModelUnavailableError(
            f"model {spec.model!r} (backend {spec.backend}): {role} failed to start: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def make_perceiver(spec: ModelSpec | Mapping[str, Any]) -> Perceiver:
    """The perception model (images + prompt -> text) described by `spec`."""
    return _build(_PERCEIVERS, _as_spec(spec), "perception")


def make_reasoner(spec: ModelSpec | Mapping[str, Any]) -> Reasoner:
    """The reasoning model (chat messages -> text) described by `spec`."""
    return _build(_REASONERS, _as_spec(spec), "reasoning")

"""Every runtime parameter of the robot pipeline, in one table.

The table below is the single definition of each parameter: its dotted name (as a ROS
parameter), default, type and description. The ROS nodes declare their parameters from
it (so `ros2 param describe` shows the descriptions), the in-process runner reads the
same YAML file (`config/embodied_r.yaml`, ROS parameter-file format) through
`load_parameters`, and `docs_table()` renders the README's parameter reference.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from embodied_r_ros.core.errors import ConfigError


@dataclass(frozen=True)
class ParamSpec:
    name: str
    default: Any
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None

    @property
    def kind(self) -> type:
        return type(self.default)


def _model_params(prefix: str, what: str, temperature: float, max_new_tokens: int) -> list[ParamSpec]:
    return [
        ParamSpec(f"{prefix}.backend", "transformers",
                  f"How the {what} runs: 'transformers' (in-process, CPU or GPU), 'openai' "
                  "(any OpenAI-compatible server: vLLM, transformers serve, hosted API) or "
                  "'vllm' (in-process vLLM, GPU only).", ("transformers", "openai", "vllm")),
        ParamSpec(f"{prefix}.model", "",
                  f"Model id or local folder of the {what}. Required: an empty or missing "
                  "model stops the node at start-up with an error."),
        ParamSpec(f"{prefix}.device", "auto",
                  "Device for in-process backends: auto (GPU when present), cpu, cuda, cuda:N."),
        ParamSpec(f"{prefix}.dtype", "auto",
                  "Weight dtype for in-process backends: auto, bfloat16, float16, float32.",
                  ("auto", "bfloat16", "float16", "float32")),
        ParamSpec(f"{prefix}.base_url", "",
                  "Server URL for the 'openai' backend, e.g. http://gpu-host:8000/v1."),
        ParamSpec(f"{prefix}.api_key_env", "OPENAI_API_KEY",
                  "Name of the environment variable holding the API key ('openai' backend; "
                  "the key is optional for local servers)."),
        ParamSpec(f"{prefix}.served_model_name", "",
                  "Model name sent to the server ('openai' backend); empty = the model value."),
        ParamSpec(f"{prefix}.timeout_s", 120.0,
                  "Seconds one model call may take before it fails with a timeout.", minimum=0.1),
        ParamSpec(f"{prefix}.max_retries", 2,
                  "Retries of a failed server call (connection errors, 5xx, 429).", minimum=0),
        ParamSpec(f"{prefix}.temperature", temperature,
                  "Sampling temperature; 0 means greedy decoding.", minimum=0.0),
        ParamSpec(f"{prefix}.max_new_tokens", max_new_tokens,
                  "Upper bound on generated tokens per call.", minimum=1),
        ParamSpec(f"{prefix}.top_p", 1.0, "Nucleus sampling mass (used when temperature > 0).",
                  minimum=0.0),
        ParamSpec(f"{prefix}.extra_json", "{}",
                  "Extra backend options as a JSON object, e.g. vLLM's "
                  '{"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8}.'),
    ]


PARAMETERS: tuple[ParamSpec, ...] = tuple([
    # --- camera input ---------------------------------------------------------------
    ParamSpec("camera.topic", "/camera/image_raw",
              "Camera topic: sensor_msgs/Image, or sensor_msgs/CompressedImage when "
              "camera.compressed is true. Subscribed with sensor-data QoS."),
    ParamSpec("camera.compressed", False,
              "Subscribe to sensor_msgs/CompressedImage (JPEG/PNG) instead of raw Image."),
    ParamSpec("camera.max_image_side", 640,
              "Downscale incoming frames so the longer side is at most this many pixels "
              "before key-frame selection and perception (0 keeps full size).", minimum=0),
    # --- key frames ----------------------------------------------------------------------
    ParamSpec("keyframes.sample_fps", 1.0,
              "Frames per second of stream time (header stamps) kept for key-frame "
              "selection; the method uses 1. 0 keeps every frame.", minimum=0.0),
    ParamSpec("keyframes.overlap_threshold", 0.5,
              "A sampled frame becomes a key frame when its overlap with the last key "
              "frame falls below this (0..1).", minimum=0.0),
    ParamSpec("keyframes.min_matches", 10,
              "Frames with this many ORB matches or fewer count as new views.", minimum=0),
    ParamSpec("keyframes.ransac_reproj_threshold", 5.0,
              "RANSAC reprojection threshold in pixels for the frame-to-frame homography.",
              minimum=0.0),
    ParamSpec("keyframes.min_keyframes", 4,
              "At least this many frames go into the reasoning prompt when the stream has "
              "them (extra frames are sampled evenly).", minimum=1),
    ParamSpec("keyframes.max_keyframes", 32,
              "At most this many frames go into the reasoning prompt (first and last kept, "
              "the middle sampled evenly).", minimum=2),
    ParamSpec("keyframes.ring_size", 120,
              "Sampled frames remembered for padding short episodes up to min_keyframes "
              "and for on_query mode (bounded memory).", minimum=1),
    # --- perception (VLM) ------------------------------------------------------------------
    ParamSpec("perception.mode", "streaming",
              "'streaming': describe each key frame as it arrives, question-free, so a "
              "question only costs the reasoning step. 'on_query': the paper's question-"
              "aware descriptions, made when the question arrives (embedded node only).",
              ("streaming", "on_query")),
    *_model_params("perception", "vision-language model", 0.1, 1024),
    ParamSpec("perception.max_image_side", 640,
              "Key frames are shrunk so their longer side is at most this many pixels "
              "before they are encoded for the VLM: fewer image tokens, faster answers, "
              "less detail. 0 sends them as received (the paper's full resolution).",
              minimum=0),
    ParamSpec("perception.image_format", "jpeg",
              "Encoding of the key frames sent to the VLM: 'jpeg' (OpenCV JPEG, as the "
              "method does) or 'png' (lossless). In-process backends decode it again, so "
              "they see the same pixels as a server.", ("jpeg", "png")),
    ParamSpec("perception.jpeg_quality", 95,
              "JPEG quality 1-100 of the key frames sent to the VLM; 95 (OpenCV's "
              "default) is what the method uses.", minimum=1),
    ParamSpec("perception.use_odometry", False,
              "Take the motion between key frames from odometry instead of the VLM's guess."),
    ParamSpec("perception.odometry_topic", "/odom",
              "nav_msgs/Odometry topic used when perception.use_odometry is true."),
    # --- reasoning (LM) ------------------------------------------------------------------
    *_model_params("reasoning", "reasoning language model", 0.0, 1024),
    # --- prompts ---------------------------------------------------------------------------
    ParamSpec("prompts.file", "",
              "YAML file with your own prompt templates (perception, reasoning, video "
              "text, consistency judge); keys left out keep the shipped wording. Empty = "
              "the shipped prompts. See docs/method.md and `python -m "
              "embodied_r_ros.core.prompt_set`."),
    # --- questions -------------------------------------------------------------------------
    ParamSpec("qa.default_timeout_s", 300.0,
              "Time limit of one question when the request gives none.", minimum=0.1),
    ParamSpec("qa.include_current_view", True,
              "Make the newest sampled frame the last key frame when a question arrives, so "
              "the answer reflects the current view (the method always keeps the last frame)."),
    # --- topics and services ---------------------------------------------------------------
    ParamSpec("topics.keyframes", "keyframes", "Topic of embodied_r_ros/KeyFrame messages."),
    ParamSpec("topics.descriptions", "frame_descriptions",
              "Topic of embodied_r_ros/FrameDescription messages."),
    ParamSpec("topics.answers", "answers", "Topic where every answer is published."),
    ParamSpec("services.ask", "ask", "Name of the AskSpatial service."),
    ParamSpec("services.answer_action", "answer", "Name of the AnswerSpatial action."),
])

PARAMS_BY_NAME: dict[str, ParamSpec] = {p.name: p for p in PARAMETERS}


def defaults() -> dict[str, Any]:
    return {p.name: p.default for p in PARAMETERS}


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name))
        else:
            flat[name] = value
    return flat


def validate(values: Mapping[str, Any], *, source: str = "parameters") -> dict[str, Any]:
    """Check names, types, choices and ranges; return a full dict with defaults filled in."""
    out = defaults()
    for name, value in values.items():
        spec = PARAMS_BY_NAME.get(name)
        if spec is None:
            raise ConfigError(f"{source}: unknown parameter {name!r}; known parameters are "
                              f"listed in config/embodied_r.yaml and the README")
        kind = spec.kind
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is bool and not isinstance(value, bool) or (
            kind is not bool and (isinstance(value, bool) or not isinstance(value, kind))
        ):
            raise ConfigError(f"{source}: parameter {name!r} must be {kind.__name__}, "
                              f"got {value!r}")
        if spec.choices and value not in spec.choices:
            raise ConfigError(f"{source}: parameter {name!r} must be one of "
                              f"{', '.join(spec.choices)}; got {value!r}")
        if spec.minimum is not None and value < spec.minimum:
            raise ConfigError(f"{source}: parameter {name!r} must be >= {spec.minimum}; "
                              f"got {value!r}")
        out[name] = value
    if out["keyframes.min_keyframes"] > out["keyframes.max_keyframes"]:
        raise ConfigError(f"{source}: keyframes.min_keyframes must not exceed "
                          "keyframes.max_keyframes")
    for prefix in ("perception", "reasoning"):
        extra_json(out, prefix)  # fail early on bad JSON
    return out


def load_parameters(path: str | Path, node_name: str | None = None,
                    overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Read a ROS 2 parameter file and return validated flat parameters.

    Values under the `/**` section apply to every node; a section named after
    `node_name` (with or without a leading slash) is applied on top. `overrides`
    (dotted names) win over both.
    """
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"parameter file {path} does not exist") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"parameter file {path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f"parameter file {path}: top level must be a mapping of node names")
    merged: dict[str, Any] = {}
    sections: list[str] = ["/**"]
    if node_name:
        sections += [node_name.lstrip("/"), "/" + node_name.lstrip("/")]
    for section in sections:
        body = doc.get(section)
        if body is None:
            continue
        params = body.get("ros__parameters") if isinstance(body, Mapping) else None
        if not isinstance(params, Mapping):
            raise ConfigError(f"parameter file {path}: section {section!r} needs a "
                              "'ros__parameters' mapping")
        merged.update(_flatten(params))
    merged.update(overrides or {})
    return validate(merged, source=str(path))


def extra_json(params: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    raw = params.get(f"{prefix}.extra_json", "{}") or "{}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"parameter {prefix}.extra_json is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"parameter {prefix}.extra_json must be a JSON object")
    return value


_MODEL_KEYS = ("backend", "model", "device", "dtype", "base_url", "api_key_env",
               "served_model_name", "timeout_s", "max_retries", "temperature",
               "max_new_tokens", "top_p")


def model_spec_dict(params: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The `ModelSpec.from_dict` input for 'perception' or 'reasoning'."""
    spec = {key: params[f"{prefix}.{key}"] for key in _MODEL_KEYS}
    for key in ("max_image_side", "image_format", "jpeg_quality"):
        if f"{prefix}.{key}" in params:
            spec[key] = params[f"{prefix}.{key}"]
    extra = extra_json(params, prefix)
    if extra:
        spec["extra"] = extra
    return spec


def docs_table(specs: Iterable[ParamSpec] = PARAMETERS) -> str:
    """Markdown table of every parameter (used for the README)."""
    rows = ["| parameter | default | description |", "|---|---|---|"]
    for spec in specs:
        default = json.dumps(spec.default) if not isinstance(spec.default, str) else f'"{spec.default}"'
        desc = spec.description + (f" One of: {', '.join(spec.choices)}." if spec.choices else "")
        rows.append(f"| `{spec.name}` | `{default}` | {desc} |")
    return "\n".join(rows)

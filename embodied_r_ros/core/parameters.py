"""Every runtime parameter of the robot pipeline, in one table.

The table below is the single definition of each parameter: its dotted name (as a ROS
parameter), default, type and description. The ROS nodes declare their parameters from
it (so `ros2 param describe` shows the descriptions), the in-process runner reads the
same YAML file (`config/embodied_r.yaml`, ROS parameter-file format) through
`load_parameters`, and `render_docs()` renders docs/parameters.md, the parameter reference.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
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
    example: str = ""  # shown as an end-of-line comment in the YAML file
    maximum: float | None = None  # integers without one are capped at INT_MAXIMUM

    @property
    def kind(self) -> type:
        return type(self.default)


def _model_params(prefix: str, what: str, temperature: float, max_new_tokens: int,
                  example: str) -> list[ParamSpec]:
    return [
        ParamSpec(f"{prefix}.backend", "transformers",
                  f"How the {what} runs: 'transformers' (in-process, CPU or GPU), 'openai' "
                  "(any OpenAI-compatible server: vLLM, transformers serve, hosted API) or "
                  "'vllm' (in-process vLLM, GPU only).", ("transformers", "openai", "vllm")),
        ParamSpec(f"{prefix}.model", "",
                  f"Model id or local folder of the {what}. Required: an empty or missing "
                  "model fails the configure transition with the reason.",
                  example=example),
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
        ParamSpec(f"{prefix}.kv_cache", "dynamic",
                  "transformers backend: 'static' allocates the KV cache once per call, a "
                  "shape torch.compile can capture; 'dynamic' grows it per token. Same "
                  "greedy output (docs/gpu.md).", ("dynamic", "static")),
        ParamSpec(f"{prefix}.max_cache_len", 0,
                  "transformers backend, static cache: tokens it holds (prompt + answer); "
                  "0 = sized per call. A fixed size keeps one compiled graph for every call.",
                  minimum=0),
        ParamSpec(f"{prefix}.compile", False,
                  "transformers backend: compile the decoding step (torch.compile, CUDA "
                  "graphs) to cut the per-token overhead on a GPU. Needs kv_cache "
                  "'static'; pair it with warmup (docs/gpu.md)."),
        ParamSpec(f"{prefix}.prompt_lookup_tokens", 0,
                  "transformers backend: prompt-lookup decoding, this many tokens proposed "
                  "from the prompt per step and checked in one pass (0 = off). Same greedy "
                  "output; helps a model that quotes its prompt (the reasoning model).",
                  minimum=0),
        ParamSpec(f"{prefix}.warmup", False,
                  "transformers backend: run short generations at configure, so the first "
                  "request does not pay compilation."),
        ParamSpec(f"{prefix}.extra_json", "{}",
                  "Extra backend options as a JSON object, e.g. vLLM's "
                  '{"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8}.'),
    ]


PARAMETERS: tuple[ParamSpec, ...] = tuple([
    # --- node lifecycle ---------------------------------------------------------------
    ParamSpec("autostart", True,
              "Bring the node to the active state by itself at start-up (configure, then "
              "activate). When configuring fails the process exits with code 1 and the "
              "reason. Set false when a lifecycle manager drives the transitions; the node "
              "then waits, unconfigured, for a configure request."),
    # --- camera input ---------------------------------------------------------------
    ParamSpec("camera.topic", "/camera/image_raw",
              "Camera topic: sensor_msgs/Image, or sensor_msgs/CompressedImage when "
              "camera.compressed is true."),
    ParamSpec("camera.compressed", False,
              "Subscribe to sensor_msgs/CompressedImage (JPEG/PNG) instead of raw Image."),
    ParamSpec("camera.reliability", "best_effort",
              "QoS reliability of the camera subscription: best_effort (sensor-data QoS, "
              "matches every camera driver) or reliable (only matches reliable publishers).",
              ("best_effort", "reliable")),
    ParamSpec("camera.depth", 5,
              "QoS history depth of the camera subscription (frames buffered while the "
              "node is busy; older ones are dropped by DDS).", minimum=1,
              maximum=1000),
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
    *_model_params("perception", "vision-language model", 0.1, 1024,
                   "e.g. Qwen/Qwen2.5-VL-72B-Instruct or /models/qwen2.5-vl-7b"),
    ParamSpec("perception.max_image_side", 640,
              "Longest side of the key-frame images kept, published and sent to the VLM "
              "(0 = full size, the paper's setup). Key-frame detection always runs on the "
              "full decoded frame; the shrink happens after selection: fewer image tokens "
              "and faster answers, less detail.", minimum=0),
    ParamSpec("perception.max_queue", 64,
              "Most key frames waiting for the VLM. When perception falls behind, the "
              "oldest waiting key frame is dropped (counted, reported in answers).",
              minimum=1),
    ParamSpec("perception.batch_size", 4,
              "Most waiting key frames described together in one batched VLM call. Each is "
              "still paired with its own predecessor and gets the same text as one at a "
              "time (greedy decoding); on a GPU a batch costs about as much as one frame, "
              "so perception keeps up with a moving robot. 1 = one at a time.", minimum=1),
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
    *_model_params("reasoning", "reasoning language model", 0.0, 1024,
                   "e.g. EmbodiedCity/Embodied-R or /models/embodied-r-3b"),
    # --- prompts ---------------------------------------------------------------------------
    ParamSpec("prompts.file", "",
              "YAML file with your own prompt templates (perception, reasoning, video "
              "text, consistency judge); keys left out keep the shipped wording. Empty = "
              "the shipped prompts. See docs/method.md and `python -m "
              "embodied_r_ros.core.prompts.prompt_set`."),
    # --- long episodes ---------------------------------------------------------------------
    ParamSpec("episode.policy", "window",
              "What bounds a long episode: 'window' keeps the first key frame and the "
              "episode.max_keyframes - 1 most recent ones (older descriptions are "
              "forgotten; a question sees the start and the recent past); 'restart' starts "
              "a new episode when episode.max_keyframes or episode.max_duration_s is "
              "reached (a question sees the current episode only).", ("window", "restart")),
    ParamSpec("episode.max_keyframes", 256,
              "Most key frames (descriptions) an episode keeps; see episode.policy. A "
              "question is answered from at most keyframes.max_keyframes of them.",
              minimum=2),
    ParamSpec("episode.max_duration_s", 0.0,
              "With episode.policy 'restart': also start a new episode after this many "
              "seconds of stream time (0 = no time budget).", minimum=0.0),
    ParamSpec("episode.selection", "relevant",
              "Which key frames a question is given when the episode has more than "
              "keyframes.max_keyframes: 'even' (the paper's spread: first, last, evenly "
              "between) or 'relevant' (first, the newest memory.recent_keyframes, those the "
              "question's time words point to, then the most relevant to the question by "
              "FTS5/BM25 over the stored observations, each labelled with its age). An "
              "episode that fits gets the paper's prompt either way. See docs/memory.md.",
              ("even", "relevant")),
    # --- long-horizon memory (docs/memory.md) ---------------------------------------------
    ParamSpec("memory.path", "",
              "SQLite file of the key-frame memory (WAL; one per robot namespace). Empty = "
              "$ROS_HOME/embodied_r/<namespace>.sqlite (~/.ros when ROS_HOME is unset); "
              "':memory:' keeps it in RAM only (nothing survives a restart)."),
    ParamSpec("memory.continue_episode", True,
              "On configure, continue the store's current episode and its key-frame "
              "numbering (a restart or crash loses nothing); false starts a new episode."),
    ParamSpec("memory.recent_keyframes", 4,
              "With episode.selection 'relevant': how many of the newest key frames (the "
              "current view) every question is given.", minimum=1),
    ParamSpec("memory.embedding_model", "",
              "Text embedding model (a transformers text model: folder or cached hub id; "
              "vectors are mean-pooled) whose similarity to the question is fused with the FTS5/BM25 "
              "relevance; vectors are computed by the store's writer thread. Empty = "
              "lexical relevance only."),
    ParamSpec("memory.embedding_device", "cpu",
              "Device of the embedding model: cpu, cuda, cuda:N or auto."),
    ParamSpec("memory.thumbnail_px", 320,
              "Longer side in pixels of the JPEG thumbnail stored per key frame (the split "
              "graph's reasoning node takes the images from the key-frame topic); 0 = no "
              "thumbnails.", minimum=0),
    ParamSpec("memory.thumbnail_quality", 70,
              "JPEG quality (1-100) of the stored thumbnails.", minimum=1),
    ParamSpec("memory.max_age_h", 0.0,
              "Retention: key frames older than this many hours (wall time written) are "
              "removed in the background; 0 = no age limit.", minimum=0.0),
    ParamSpec("memory.max_mb", 2000.0,
              "Retention: when the store holds more than this many megabytes the oldest key "
              "frames are removed in the background (the current episode's first is kept); "
              "0 = no size limit.", minimum=0.0),
    ParamSpec("memory.retention_period_s", 60.0,
              "Seconds between background retention passes.", minimum=1.0),
    # --- questions -------------------------------------------------------------------------
    ParamSpec("qa.default_timeout_s", 300.0,
              "Time limit of one question when the request gives none.", minimum=0.1),
    ParamSpec("qa.max_question_chars", 2000,
              "Longest question accepted, in characters; longer ones fail with "
              "INVALID_REQUEST.", minimum=1),
    ParamSpec("qa.max_question_tokens", 512,
              "Longest question accepted, in tokens of the reasoning model (estimated as "
              "characters / 3 when its backend has no tokenizer).", minimum=1),
    ParamSpec("qa.max_choice_chars", 200,
              "Longest answer choice accepted, in characters (choices may not contain line "
              "breaks or option markers such as 'B.').", minimum=1),
    ParamSpec("qa.max_waiting_questions", 4,
              "Questions that may wait while one is answered; more fail at once with BUSY "
              "(action goals are rejected).", minimum=0),
    ParamSpec("qa.self_check", False,
              "After answering a multiple-choice question, let the consistency judge "
              "re-derive the letter from the reasoning alone (as the training's consistency "
              "reward does); a disagreement is flagged in the answer (self_check, "
              "self_check_letter). Costs one short extra model call."),
    ParamSpec("qa.self_check_model", "",
              "Model id or folder of the self-check judge, run with the reasoning.* "
              "settings; empty = the reasoning model itself (no extra memory)."),
    ParamSpec("qa.include_current_view", True,
              "Make the newest sampled frame the last key frame when a question arrives, so "
              "the answer reflects the current view (the method always keeps the last frame)."),
    # --- diagnostics -------------------------------------------------------------------------
    ParamSpec("diagnostics.period_s", 1.0,
              "Seconds between diagnostic_msgs/DiagnosticArray messages on /diagnostics "
              "(0 = none).", minimum=0.0),
    ParamSpec("diagnostics.window_s", 10.0,
              "Seconds over which rates and recent drops/failures are counted.", minimum=1.0),
    ParamSpec("diagnostics.stale_input_s", 5.0,
              "WARN when an active node has had no camera frame for this many seconds.",
              minimum=0.1),
    ParamSpec("diagnostics.drop_warn_fraction", 0.1,
              "WARN when more than this fraction of the recent camera frames were dropped.",
              minimum=0.0),
    ParamSpec("diagnostics.queue_warn_fraction", 0.5,
              "WARN when the perception queue holds this fraction of perception.max_queue.",
              minimum=0.0),
    ParamSpec("diagnostics.failures_error_count", 3,
              "ERROR when this many key frames in a row failed perception.", minimum=1),
    ParamSpec("diagnostics.memory_warn_mb", 0.0,
              "WARN when the node's resident memory exceeds this many MB (0 = off).",
              minimum=0.0),
    # --- topics and services ---------------------------------------------------------------
    ParamSpec("topics.keyframes", "keyframes", "Topic of embodied_r_ros/KeyFrame messages."),
    ParamSpec("topics.descriptions", "frame_descriptions",
              "Topic of embodied_r_ros/FrameDescription messages."),
    ParamSpec("topics.answers", "answers", "Topic where every answer is published."),
    ParamSpec("services.ask", "ask", "Name of the AskSpatial service."),
    ParamSpec("services.answer_action", "answer", "Name of the AnswerSpatial action."),
    ParamSpec("services.reset", "reset_episode",
              "Name of the std_srvs/Trigger service that starts a new episode."),
    ParamSpec("services.recall", "recall",
              "Name of the embodied_r_ros/Recall service (key frames by text, no model; "
              "served by the node that owns the key-frame store)."),
    ParamSpec("services.status", "status", "Name of the embodied_r_ros/GetStatus service."),
    # --- split graph ------------------------------------------------------------------------
    ParamSpec("split.keyframe_node", "keyframe_selector",
              "Split graph: name of the key-frame node (relative names resolve in this "
              "node's namespace); the reasoning node asks it for the current view."),
    ParamSpec("split.perception_node", "perception",
              "Split graph: name of the perception node, whose lifecycle state the "
              "reasoning node checks while a question waits for descriptions."),
    ParamSpec("split.peer_timeout_s", 2.0,
              "Split graph: a peer node that does not answer within this many seconds "
              "counts as down, and a question waiting on it fails at once with the reason.",
              minimum=0.1),
    ParamSpec("split.keyframe_state_service", "keyframes/state",
              "Split graph: the key-frame node's embodied_r_ros/KeyFrameState service."),
    ParamSpec("split.described_service", "descriptions/known",
              "Split graph: the reasoning node's embodied_r_ros/DescribedFrames service, "
              "asked by a (re)starting perception node so that key frames already "
              "described are not described again."),
    ParamSpec("split.episodes_kept", 2,
              "Split graph: episodes whose descriptions the reasoning node keeps (the "
              "current one and the ones before it); older ones are forgotten.", minimum=1),
    ParamSpec("topics.episode", "episode",
              "Topic of embodied_r_ros/Episode messages: the key-frame source announces each "
              "new episode (transient-local)."),
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


# Largest integer any integer parameter takes (QoS depths, counts and sizes all fit a
# signed 32-bit int; rclpy and DDS refuse larger ones only later, with a TypeError).
INT_MAXIMUM = 2**31 - 1
# Parameters every ROS 2 node has besides the table's (never reported as unknown).
ROS_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})


def closest_names(name: str) -> list[str]:
    """The known parameters closest to a misspelt `name` (at most two), best first."""
    return difflib.get_close_matches(name, list(PARAMS_BY_NAME), n=2, cutoff=0.75)


def unknown_name_message(name: str, source: str) -> str:
    near = closest_names(name)
    hint = ("did you mean " + " or ".join(repr(n) for n in near) + "?") if near else (
        "known parameters are listed in config/embodied_r.yaml and docs/parameters.md")
    return f"{source}: unknown parameter {name!r}; {hint}"


def _type_name(kind: type) -> str:
    return {float: "a number", int: "an integer", bool: "true or false",
            str: "a string"}.get(kind, kind.__name__)


def check_value(spec: ParamSpec, value: Any, *, source: str = "parameters") -> Any:
    """One parameter's value, checked (type, finiteness, choices, range) and converted
    where users type it loosely (an integer for a number: `-p x.temperature:=0`).
    Raises ConfigError with one line saying what to change."""
    name, kind = spec.name, spec.kind
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is bool and not isinstance(value, bool) or (
        kind is not bool and (isinstance(value, bool) or not isinstance(value, kind))
    ):
        raise ConfigError(f"{source}: parameter {name!r} must be {kind.__name__} "
                          f"({_type_name(kind)}, default {spec.default!r}), got {value!r} "
                          f"({type(value).__name__}); e.g. -p {name}:={_example(spec)}")
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{source}: parameter {name!r} must be a finite number, got "
                          f"{value!r}; e.g. -p {name}:={_example(spec)}")
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{source}: parameter {name!r} must be one of "
                          f"{', '.join(spec.choices)}; got {value!r}")
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(f"{source}: parameter {name!r} must be >= {spec.minimum}; "
                          f"got {value!r}")
    maximum = spec.maximum if spec.maximum is not None else (
        INT_MAXIMUM if kind is int else None)
    if maximum is not None and value > maximum:
        raise ConfigError(f"{source}: parameter {name!r} must be <= {maximum:g}; "
                          f"got {value!r}")
    return value


def _example(spec: ParamSpec) -> str:
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    return json.dumps(spec.default) if isinstance(spec.default, str) else repr(spec.default)


def validate(values: Mapping[str, Any], *, source: str = "parameters") -> dict[str, Any]:
    """Check names, types, choices and ranges; return a full dict with defaults filled in."""
    out = defaults()
    for name, value in values.items():
        spec = PARAMS_BY_NAME.get(name)
        if spec is None:
            raise ConfigError(unknown_name_message(name, source))
        out[name] = check_value(spec, value, source=source)
    if out["keyframes.min_keyframes"] > out["keyframes.max_keyframes"]:
        raise ConfigError(f"{source}: keyframes.min_keyframes must not exceed "
                          "keyframes.max_keyframes")
    for prefix in ("perception", "reasoning"):
        extra_json(out, prefix)  # fail early on bad JSON
    return out


def load_parameters(path: str | Path | Sequence[str | Path], node_name: str | None = None,
                    overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Read one or more ROS 2 parameter files and return validated flat parameters.

    Files apply in order (a later file wins, as with several --params-file arguments).
    In each, values under the `/**` section apply to every node; a section named after
    `node_name` (with or without a leading slash) is applied on top. `overrides`
    (dotted names) win over all files.
    """
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    merged: dict[str, Any] = {}
    for one in paths:
        merged.update(read_parameter_file(Path(one), node_name))
    merged.update(overrides or {})
    return validate(merged, source=", ".join(str(p) for p in paths))


def read_parameter_file(path: Path, node_name: str | None) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"parameter file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"parameter file {path} cannot be read: {exc}") from exc
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
    return merged


def extra_json(params: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    raw = params.get(f"{prefix}.extra_json", "{}") or "{}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"parameter {prefix}.extra_json is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"parameter {prefix}.extra_json must be a JSON object")
    return value


def yaml_scalar(value: Any) -> str:
    """A parameter value as YAML: in the generated file and in `-p name:=value` (ROS
    parses that as YAML). Strings are double-quoted (JSON string syntax is valid YAML),
    so paths, numbers-as-text and JSON stay text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _wrapped_comment(text: str, indent: str, width: int = 88) -> list[str]:
    import textwrap

    return [indent + "# " + line for line in
            textwrap.wrap(text, width=width - len(indent) - 2, break_on_hyphens=False)]


YAML_HEADER = """\
# Parameters of the embodied_r_ros nodes (ROS 2 parameter-file format).
# GENERATED from the table in embodied_r_ros/core/parameters.py (python -m
# embodied_r_ros.core.parameters --write-yaml); edit the table, not this file.
# One file for every node: `/**` applies to all of them; each node reads only the
# parameters it uses. The same file feeds `ros2 launch embodied_r_ros
# embodied_r.launch.py` and the runner used where ros2 launch is missing.
"""


def render_yaml(specs: Iterable[ParamSpec] = PARAMETERS) -> str:
    """config/embodied_r.yaml as generated from the table (a test keeps them equal)."""
    lines = YAML_HEADER.splitlines() + ["/**:", "  ros__parameters:"]
    specs = list(specs)
    first: dict[str, int] = {}
    for i, spec in enumerate(specs):
        first.setdefault(spec.name.split(".")[0] if "." in spec.name else "", i)
    specs.sort(key=lambda sp: first[sp.name.split(".")[0] if "." in sp.name else ""])
    group = None
    for spec in specs:
        parts = spec.name.split(".")
        head, leaf = (parts[0], parts[-1]) if len(parts) > 1 else (None, parts[0])
        indent = "    " if head is None else "      "
        if head != group:
            if head is not None:
                lines.append(f"    {head}:")
            group = head
        text = spec.description + (f" ({' | '.join(spec.choices)})" if spec.choices else "")
        lines += _wrapped_comment(text, indent)
        line = f"{indent}{leaf}: {yaml_scalar(spec.default)}"
        if spec.example:
            line += f"  # {spec.example}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def docs_table(specs: Iterable[ParamSpec] = PARAMETERS) -> str:
    """Markdown table of every parameter (the body of docs/parameters.md)."""
    rows = ["| parameter | default | description |", "|---|---|---|"]
    for spec in specs:
        default = json.dumps(spec.default) if not isinstance(spec.default, str) else f'"{spec.default}"'
        desc = spec.description + (f" One of: {', '.join(spec.choices)}." if spec.choices else "")
        rows.append(f"| `{spec.name}` | `{default}` | {desc} |")
    return "\n".join(rows)


DOCS_HEADER = """\
# Parameters

<!-- Generated from embodied_r_ros/core/parameters.py; do not edit by hand. Regenerate with:
     python -m embodied_r_ros.core.parameters --write-docs -->

Every node of the graph reads one ROS 2 parameter file, `config/embodied_r.yaml`; the
values below are its defaults. Both this page and that file are generated from the table
in `embodied_r_ros/core/parameters.py`, which the nodes also declare their parameters from
(`ros2 param describe` shows the same descriptions), and tests keep the three in step.
Pass your own file with `params_file:=...` and a model setup with `models:=...`
(README, "Using it on a robot"); parameters can be changed only while a node is
unconfigured.

"""


def render_docs(specs: Iterable[ParamSpec] = PARAMETERS) -> str:
    """docs/parameters.md: a short header and the table of every parameter."""
    return DOCS_HEADER + docs_table(specs) + "\n"


_REPO = Path(__file__).resolve().parents[2]
_TARGETS = {"--write-yaml": (_REPO / "config" / "embodied_r.yaml", render_yaml),
            "--write-docs": (_REPO / "docs" / "parameters.md", render_docs)}


def main(argv: list[str] | None = None) -> int:
    """`python -m embodied_r_ros.core.parameters --write-yaml|--write-docs [PATH]`
    regenerates config/embodied_r.yaml or docs/parameters.md from the table."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in _TARGETS:
        print("usage: python -m embodied_r_ros.core.parameters --write-yaml|--write-docs [PATH]")
        return 2
    default_path, render = _TARGETS[args[0]]
    path = Path(args[1]) if len(args) > 1 else default_path
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

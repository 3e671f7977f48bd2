"""`ModelSpec`: how to reach one model. Its fields are the YAML keys of a model section.

Example (perception model through a vLLM server, reasoning model in-process)::

    perception_model:
      backend: openai
      model: Qwen/Qwen2.5-VL-72B-Instruct
      base_url: http://gpu-box:8000/v1
      temperature: 0.1
      max_new_tokens: 1024
      max_image_side: 0      # full resolution, as the reference
      image_format: jpeg
      jpeg_quality: 95
    reasoning_model:
      backend: transformers
      model: EmbodiedCity/Embodied-R
      device: cuda:0
      dtype: bfloat16
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.types import GenerationSettings

if TYPE_CHECKING:
    from embodied_r_ros.core.backends.images import ImageEncoding

BACKENDS = ("transformers", "openai", "vllm")
IMAGE_FORMATS = ("jpeg", "png")
DTYPES = ("auto", "bfloat16", "float16", "float32")
KV_CACHES = ("dynamic", "static")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")


@dataclass
class ModelSpec:
    """Where a model lives and how to run it. Every field is a YAML key.

    Attributes:
        backend: "transformers" (in-process, the default), "openai" (any
            OpenAI-compatible HTTP server: vLLM, `transformers serve`, a hosted API) or
            "vllm" (in-process vLLM engine; needs a CUDA GPU and the vllm package).
        model: Hugging Face hub id or local folder written by `save_pretrained`. For the
            openai backend, the default name sent to the server.
        device: "auto" (CUDA if present, else CPU), "cpu", "cuda", "cuda:N" or "mps".
            Ignored by the openai backend.
        dtype: weights dtype: "auto" (bfloat16 on CUDA, float32 on CPU), "bfloat16",
            "float16" or "float32". Ignored by the openai backend.
        base_url: server root for the openai backend, e.g. "http://127.0.0.1:8000/v1"
            (a URL without "/v1" gets it appended). Required for that backend only.
        api_key_env: name of the environment variable holding the API key (the key
            itself never goes into a config file). A missing variable means no key.
        served_model_name: model name sent in requests; empty means `model`.
        timeout_s: seconds one HTTP request (or one in-process generation, for the
            ROS nodes that enforce it) may take before a timeout error.
        max_retries: extra attempts after a connection error, HTTP 429 or 5xx (openai).
        retry_backoff_s: first wait between retries; doubles every retry.
        temperature: sampling temperature; 0 means greedy decoding.
        max_new_tokens: most tokens generated per request.
        top_p: nucleus sampling mass (used only when temperature > 0).
        seed: sampling seed (None: not seeded).
        max_image_side: images whose longer side exceeds this many pixels are
            downscaled (area filter, aspect kept) before encoding; 0 (the default)
            keeps the decoded resolution, as the reference does (the VLM processor's
            own pixel budget still applies).
        image_format: how images are encoded for the VLM, by every backend: "jpeg"
            (the reference's OpenCV JPEG, the default) or "png" (lossless). In-process
            backends decode the JPEG again, so they see what a server would see.
        jpeg_quality: JPEG quality 1..100; 95 (OpenCV's default) gives the
            reference's bytes.
        batch_size: most requests generated together by `describe_batch` /
            `generate_batch`; larger inputs are split into chunks of this size.
        trust_remote_code: allow custom modelling code from the model folder/hub repo.
        kv_cache: transformers backend: "dynamic" (grows per token, the default) or
            "static" (allocated once per call at its final size, a shape that
            `torch.compile` can capture). Greedy output is the same either way.
        max_cache_len: transformers backend, static cache only: tokens the cache holds
            (prompt + answer). 0 sizes it for each call; a fixed size (e.g. 6144 for the
            reasoning model) keeps one compiled graph for every call.
        compile: transformers backend: compile the decoding step with `torch.compile`
            (mode "reduce-overhead", i.e. CUDA graphs), which removes most of the Python
            and kernel-launch cost per token on a GPU. Needs kv_cache "static". The
            first call of each shape pays the compilation; set `warmup` so that happens
            at configure. `extra.compile_config` (a mapping of `transformers.CompileConfig`
            fields, e.g. {backend: eager}) overrides the defaults. Off by default: it does
            not help on a CPU.
        prompt_lookup_tokens: transformers backend: prompt-lookup decoding, proposing
            this many tokens copied from the prompt where the last generated words
            occur in it, all checked by one forward pass (0 = off). Helps the reasoning
            model, whose reasoning quotes the frame descriptions; greedy output is
            unchanged. Used for single requests only (batched calls decode plainly).
        warmup: transformers backend: run short generations when the model is loaded,
            so that the first real request does not pay compilation and allocation.
        extra: backend-specific keyword arguments. vllm: passed to `vllm.LLM` (e.g.
            tensor_parallel_size, gpu_memory_utilization, max_model_len,
            limit_mm_per_prompt). transformers: passed to `from_pretrained` of the model
            (e.g. attn_implementation, device_map), except `processor_kwargs`, a mapping
            for `AutoProcessor.from_pretrained` (e.g. {size: {shortest_edge: 3136,
            longest_edge: 401408}}), and `generate_kwargs`, a mapping added to every
            `model.generate` call (e.g. {repetition_penalty: 1.05}). openai:
            `check_model_on_start` (bool) is read by the client; every other key is
            added to the request body.
    """

    backend: str = "transformers"
    model: str = ""
    device: str = "auto"
    dtype: str = "auto"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    served_model_name: str = ""
    timeout_s: float = 120.0
    max_retries: int = 2
    retry_backoff_s: float = 1.0
    temperature: float = 0.0
    max_new_tokens: int = 512
    top_p: float = 1.0
    seed: int | None = None
    max_image_side: int = 0
    image_format: str = "jpeg"
    jpeg_quality: int = 95
    batch_size: int = 4
    trust_remote_code: bool = False
    kv_cache: str = "dynamic"
    max_cache_len: int = 0
    compile: bool = False
    prompt_lookup_tokens: int = 0
    warmup: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        """Build from a mapping (a parsed YAML section).

        Raises ConfigError naming the key on unknown keys, wrong types or bad values.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"model spec must be a mapping, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(
                f"unknown model spec key(s): {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(known))}"
            )
        kwargs = {key: _coerce(key, value, known[key].type) for key, value in data.items()}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with every field (inverse of `from_dict`)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> ModelSpec:
        """Copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("model: a hub id or a local model folder is required")
        if not _DEVICE_RE.match(str(self.device)):
            raise ConfigError(
                f"device: must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype: must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.backend == "openai":
            if not self.base_url:
                raise ConfigError("base_url: required for backend 'openai'")
            if not re.match(r"^https?://", self.base_url):
                raise ConfigError(f"base_url: must start with http:// or https://, got {self.base_url!r}")
        if not self.api_key_env or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", self.api_key_env):
            raise ConfigError(f"api_key_env: must be an environment variable name, got {self.api_key_env!r}")
        _check(self.timeout_s > 0, "timeout_s", "must be > 0", self.timeout_s)
        _check(self.max_retries >= 0, "max_retries", "must be >= 0", self.max_retries)
        _check(self.retry_backoff_s >= 0, "retry_backoff_s", "must be >= 0", self.retry_backoff_s)
        _check(self.temperature >= 0, "temperature", "must be >= 0", self.temperature)
        _check(self.max_new_tokens >= 1, "max_new_tokens", "must be >= 1", self.max_new_tokens)
        _check(0 < self.top_p <= 1, "top_p", "must be in (0, 1]", self.top_p)
        _check(self.max_image_side >= 0, "max_image_side", "must be >= 0 (0 = off)", self.max_image_side)
        _check(self.image_format in IMAGE_FORMATS, "image_format",
               f"must be one of {', '.join(IMAGE_FORMATS)}", self.image_format)
        _check(1 <= self.jpeg_quality <= 100, "jpeg_quality", "must be in 1..100", self.jpeg_quality)
        _check(self.batch_size >= 1, "batch_size", "must be >= 1", self.batch_size)
        _check(self.kv_cache in KV_CACHES, "kv_cache", f"must be one of {', '.join(KV_CACHES)}",
               self.kv_cache)
        _check(self.max_cache_len == 0 or self.max_cache_len > self.max_new_tokens,
               "max_cache_len", "must be 0 (per call) or more than max_new_tokens",
               self.max_cache_len)
        _check(not self.compile or self.kv_cache == "static", "compile",
               "needs kv_cache: static (a dynamic cache changes shape every token)",
               self.compile)
        _check(self.prompt_lookup_tokens >= 0, "prompt_lookup_tokens", "must be >= 0 (0 = off)",
               self.prompt_lookup_tokens)
        if not isinstance(self.extra, dict):
            raise ConfigError(f"extra: must be a mapping, got {type(self.extra).__name__}")
        moved = sorted(k for k in ("image_format", "jpeg_quality") if k in self.extra)
        if moved:
            raise ConfigError(
                f"extra.{moved[0]}: set {', '.join(moved)} as a model key next to "
                "max_image_side, not under extra"
            )

    # ------------------------------------------------------------------ helpers
    @property
    def request_model_name(self) -> str:
        """Name sent to an OpenAI-compatible server."""
        return self.served_model_name or self.model

    def image_encoding(self) -> ImageEncoding:
        """How this model's images are resized and encoded (backends/images.py)."""
        from embodied_r_ros.core.backends.images import ImageEncoding

        return ImageEncoding(self.image_format, self.jpeg_quality, self.max_image_side)

    def settings(self) -> GenerationSettings:
        """The decoding settings this spec configures."""
        return GenerationSettings(
            temperature=float(self.temperature),
            max_new_tokens=int(self.max_new_tokens),
            top_p=float(self.top_p),
            seed=self.seed,
        )


def _check(ok: bool, key: str, rule: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: {rule}, got {value!r}")


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Check the YAML value's type for `key`; ints are accepted where floats are."""
    ann = str(annotation)
    if ann == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string, got {value!r}")
        return value
    if ann == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false, got {value!r}")
        return value
    if ann == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: must be an integer, got {value!r}")
        return value
    if ann == "int | None":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: must be an integer or null, got {value!r}")
        return value
    if ann == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: must be a number, got {value!r}")
        return float(value)
    if ann.startswith("dict"):
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: must be a mapping, got {value!r}")
        return dict(value)
    return value


# --------------------------------------------------------------------- model location
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def _hub_offline() -> bool:
    import os

    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def locate_model(spec: ModelSpec) -> str:
    """Resolve `spec.model` for an in-process backend, or raise ModelUnavailableError.

    Returns an absolute folder path for a local model, or the hub id unchanged when it is
    in the local Hugging Face cache or downloads are allowed. The error names the model,
    the backend and what was tried: a path that does not exist, a folder without
    config.json, or a hub id that is neither cached nor downloadable (offline mode).
    """
    import os
    from pathlib import Path

    from embodied_r_ros.core.errors import ModelUnavailableError

    name = spec.model.strip()
    where = f"model {name!r} (backend {spec.backend})"
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelUnavailableError(
                f"{where}: local path {path.resolve()} is a file, not a model folder"
            )
        if not (path / "config.json").is_file():
            raise ModelUnavailableError(
                f"{where}: local folder {path.resolve()} is not a model folder "
                "(no config.json; expected the output of save_pretrained)"
            )
        if not os.access(path / "config.json", os.R_OK):
            raise ModelUnavailableError(f"{where}: {path.resolve() / 'config.json'} is not readable")
        return str(path.resolve())
    looks_like_path = name.startswith(("/", ".", "~")) or not _HUB_ID_RE.match(name)
    if looks_like_path:
        raise ModelUnavailableError(
            f"{where}: local path {path} not found (tried it as a folder; it is not a "
            "valid hub id either)"
        )
    if _hub_offline():
        cached = None
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - any cache problem means "not cached"
            cached = None
        if not isinstance(cached, str):
            raise ModelUnavailableError(
                f"{where}: no local folder {path} and hub id {name!r} is not in the local "
                "Hugging Face cache; downloads are disabled (HF_HUB_OFFLINE/"
                "TRANSFORMERS_OFFLINE set). Point `model` at a local folder, or unset "
                "HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE to download it on first use (into "
                "~/.cache/huggingface/hub, or $HF_HOME/hub)."
            )
    return name

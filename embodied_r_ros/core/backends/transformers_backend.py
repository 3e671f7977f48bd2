"""In-process backends on Hugging Face transformers (the embedded default).

* `TransformersPerceiver`: AutoProcessor + AutoModelForImageTextToText (Qwen2.5-VL).
* `TransformersReasoner`: AutoTokenizer + AutoModelForCausalLM; a Qwen2/2.5-VL folder
  (such as the released Embodied-R weights, a Qwen2.5-VL-3B fine-tune) is loaded with
  AutoModelForImageTextToText and used on text only.

torch and transformers are imported when a backend is constructed, not at import time.
Every generate call holds a per-instance lock, so one instance may be shared by threads.

Decoding fast path (each a ModelSpec option, all off by default; docs/gpu.md): a static
KV cache (`kv_cache`, `max_cache_len`), `torch.compile` of the decoding step with CUDA
graphs (`compile`), prompt-lookup decoding (`prompt_lookup_tokens`) and a warm-up at load
time (`warmup`). None of them changes greedy output (test/unit/backends).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.backends.base import PerceptionRequest, StopCheck, TextCallback
from embodied_r_ros.core.backends.images import model_images
from embodied_r_ros.core.backends.model_spec import ModelSpec, locate_model
from embodied_r_ros.core.errors import (
    CancelledError,
    EmbodiedRError,
    ModelUnavailableError,
    PerceptionError,
    ReasoningError,
    RequestTimeoutError,
)
from embodied_r_ros.core.types import ChatMessage, GenerationSettings

VISION_MODEL_TYPES = frozenset({"qwen2_5_vl", "qwen2_vl"})
# `extra` keys read by this backend itself, not passed to `from_pretrained`.
_OWN_EXTRA_KEYS = ("processor_kwargs", "generate_kwargs", "compile_config")
# Tokens generated per warm-up call: enough to run (and compile) the decoding step.
WARMUP_NEW_TOKENS = 8
LOG = logging.getLogger("embodied_r_ros.backends")


# ----------------------------------------------------------------------------- helpers
def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is usable, else 'cpu'; others unchanged."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelUnavailableError(f"device {device!r} requested but no CUDA GPU is available")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """Map a spec dtype name to a torch dtype; 'auto' is bf16 on CUDA, fp32 elsewhere."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]


def is_vision_checkpoint(source: str) -> bool:
    """True when a local folder's config.json is a Qwen2-VL / Qwen2.5-VL model."""
    config = Path(source) / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    return data.get("model_type") in VISION_MODEL_TYPES or "vision_config" in data


def generation_kwargs(settings: GenerationSettings, eos_ids: list[int], pad_id: int | None) -> dict[str, Any]:
    """`generate()` keyword arguments for `settings`.

    temperature 0 -> greedy. Otherwise plain temperature + top-p sampling (top_k off,
    no repetition penalty), matching what OpenAI-compatible servers do, so a checkpoint's
    own generation_config (e.g. Qwen's top_k=1) cannot silently turn sampling greedy.
    """
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=int(settings.max_new_tokens),
        eos_token_id=eos_ids or None,
        pad_token_id=pad_id,
        do_sample=settings.temperature > 0,
    )
    if settings.temperature > 0:
        config.temperature = float(settings.temperature)
        config.top_p = float(settings.top_p)
        config.top_k = 0
    return {"generation_config": config}


def compile_config(spec: ModelSpec) -> Any:
    """The `transformers.CompileConfig` for `spec.compile`: mode "reduce-overhead" (CUDA
    graphs) unless `extra.compile_config` says otherwise. transformers compiles only on
    accelerators by itself; an explicit `compile: true` is honoured on any device."""
    from transformers import CompileConfig

    options = spec.extra.get("compile_config") or {}
    if not isinstance(options, dict):
        raise ModelUnavailableError(
            f"model {spec.model!r} (backend transformers): extra.compile_config must be a "
            f"mapping of CompileConfig fields, got {options!r}"
        )
    try:
        config = CompileConfig(**options)
    except TypeError as exc:
        raise ModelUnavailableError(
            f"model {spec.model!r} (backend transformers): extra.compile_config: {exc}"
        ) from exc
    vars(config)["_compile_all_devices"] = True  # a private field: compile on any device
    return config


def decoding_options(spec: ModelSpec, rows: int, prompt_tokens: int,
                     max_new_tokens: int) -> dict[str, Any]:
    """GenerationConfig fields of the spec's decoding fast path for one generate call of
    `rows` sequences whose (padded) prompt has `prompt_tokens` tokens.

    Prompt lookup runs for single sequences only (transformers' assisted decoding takes
    one sequence). A fixed `max_cache_len` too small for this call is replaced by the
    call's own size instead of failing; with prompt lookup that size leaves room for the
    candidates written past the last accepted token. Compilation is switched off unless
    asked for: transformers would otherwise compile any static-cache call on a GPU.
    """
    options: dict[str, Any] = {}
    lookup = int(spec.prompt_lookup_tokens) if rows == 1 else 0
    if spec.kv_cache == "static":
        options["cache_implementation"] = "static"
        # Prompt lookup may write a full set of candidates past the last kept token.
        headroom = lookup + 1 if lookup else 0
        needed = prompt_tokens + max_new_tokens + headroom
        if spec.max_cache_len and needed <= spec.max_cache_len:
            options["max_cache_len"] = int(spec.max_cache_len)
        else:
            if spec.max_cache_len:
                LOG.warning("%s: prompt (%d tokens) + max_new_tokens (%d) exceed max_cache_len "
                            "%d; this call sizes its own cache (and may recompile)", spec.model,
                            prompt_tokens, max_new_tokens, spec.max_cache_len)
            if headroom:
                options["max_cache_len"] = needed
    if spec.compile:
        options["compile_config"] = compile_config(spec)
    else:
        options["disable_compile"] = True
    if lookup:
        options["prompt_lookup_num_tokens"] = lookup
    return options


def _eos_and_pad(model: Any, tokenizer: Any) -> tuple[list[int], int | None]:
    eos: list[int] = []
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is None:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None and int(item) not in eos:
                eos.append(int(item))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(int(tokenizer.eos_token_id))
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = getattr(model.generation_config, "pad_token_id", None)
    if pad is None and eos:
        pad = eos[0]
    return eos, pad


class _Watchdog:
    """A generate() StoppingCriteria: stops on `should_stop()` or past a deadline."""

    def __init__(self, should_stop: StopCheck | None, timeout_s: float | None) -> None:
        from transformers import StoppingCriteria

        self.cancelled = False
        self.timed_out = False
        self._should_stop = should_stop
        self._deadline = None if not timeout_s else time.monotonic() + timeout_s
        watchdog = self

        class _Criteria(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                import torch

                stop = watchdog.check()
                return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

        self.criteria = _Criteria()

    def check(self) -> bool:
        if self._should_stop is not None and self._should_stop():
            self.cancelled = True
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.timed_out = True
        return self.cancelled or self.timed_out


class _CallbackStreamer:
    """A generate() streamer that sends newly decoded text to `on_text` as it appears.

    Text ending in an incomplete UTF-8 sequence (decoded as U+FFFD) is held back until
    the next token completes it. Decoding restarts from the last clean boundary, so the
    cost stays linear. The pieces concatenate to the decode of all generated tokens.
    """

    def __init__(self, tokenizer: Any, on_text: TextCallback) -> None:
        self._tokenizer = tokenizer
        self._on_text = on_text
        self._prompt_skipped = False
        self._segment: list[int] = []
        self._segment_sent = ""

    def _decode(self) -> str:
        return self._tokenizer.decode(
            self._segment, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    def put(self, value: Any) -> None:
        if not self._prompt_skipped:  # the first call carries the prompt
            self._prompt_skipped = True
            return
        self._segment.extend(int(t) for t in value.reshape(-1).tolist())
        text = self._decode()
        stable = text.rstrip("\ufffd")
        if len(stable) > len(self._segment_sent):
            piece = stable[len(self._segment_sent):]
            self._segment_sent = stable
            self._on_text(piece)
        if stable == text and text:  # clean boundary: start a new segment
            self._segment = []
            self._segment_sent = ""

    def end(self) -> None:
        text = self._decode()
        if len(text) > len(self._segment_sent):
            self._on_text(text[len(self._segment_sent):])
        self._segment = []
        self._segment_sent = ""


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


def _text_of(content: Any) -> str:
    """Message content as plain text (list contents keep their text parts only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _load_error(spec: ModelSpec, source: str, what: str, exc: BaseException) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"model {spec.model!r} (backend transformers): could not load {what} from {source}: "
        f"{type(exc).__name__}: {exc}"
    )


class _TransformersBase:
    """Loading, device placement and the generate() call shared by both backends."""

    _error_cls: type[EmbodiedRError] = ReasoningError

    def __init__(self, spec: ModelSpec, source: str | None = None) -> None:
        self.spec = spec
        self.name = f"transformers:{spec.model}"
        self._lock = threading.Lock()
        self._closed = False
        self.source = locate_model(spec) if source is None else source
        self.device = resolve_device(spec.device)
        self.dtype = resolve_dtype(spec.dtype, self.device)
        self.warmup_s = 0.0  # time the load-time warm-up took (0 when off)

    def _model_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"dtype": self.dtype, "trust_remote_code": self.spec.trust_remote_code}
        kwargs.update({k: v for k, v in self.spec.extra.items() if k not in _OWN_EXTRA_KEYS})
        return kwargs

    def _processor_kwargs(self) -> dict[str, Any]:
        """`extra.processor_kwargs` (e.g. {"size": {...}}) for AutoProcessor."""
        value = self.spec.extra.get("processor_kwargs") or {}
        if not isinstance(value, dict):
            raise ModelUnavailableError(
                f"model {self.spec.model!r} (backend transformers): extra.processor_kwargs "
                f"must be a mapping, got {value!r}"
            )
        return dict(value)

    def _place(self, model: Any) -> Any:
        if "device_map" not in self.spec.extra:
            model = model.to(self.device)
        return model.eval()

    def _run_generate(
        self,
        model: Any,
        inputs: dict[str, Any],
        settings: GenerationSettings,
        eos: list[int],
        pad: int | None,
        streamer: Any = None,
        should_stop: StopCheck | None = None,
    ) -> Any:
        import torch

        watchdog = _Watchdog(should_stop, self.spec.timeout_s)
        kwargs = generation_kwargs(settings, eos, pad)
        ids = inputs["input_ids"]
        for key, value in decoding_options(self.spec, int(ids.shape[0]), int(ids.shape[1]),
                                           int(settings.max_new_tokens)).items():
            setattr(kwargs["generation_config"], key, value)
        # `extra.generate_kwargs` (e.g. {"repetition_penalty": 1.05}) reach model.generate.
        kwargs.update(self.spec.extra.get("generate_kwargs") or {})
        with self._lock:
            if self._closed:
                raise self._error_cls(f"{self.name}: backend is closed")
            if settings.temperature > 0 and settings.seed is not None:
                torch.manual_seed(int(settings.seed))
            try:
                with torch.inference_mode():
                    output = model.generate(
                        **inputs, **kwargs, streamer=streamer, stopping_criteria=[watchdog.criteria]
                    )
            except EmbodiedRError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported as a typed backend error
                raise self._error_cls(
                    f"{self.name}: generation failed on {self.device}: {type(exc).__name__}: {exc}"
                ) from exc
        if watchdog.cancelled:
            raise CancelledError(f"{self.name}: generation cancelled by the caller")
        if watchdog.timed_out:
            raise RequestTimeoutError(
                f"{self.name}: generation exceeded timeout_s={self.spec.timeout_s:g} s"
            )
        return output

    def _warmup_settings(self) -> GenerationSettings:
        settings = self.spec.settings()
        return dataclasses.replace(settings, max_new_tokens=min(WARMUP_NEW_TOKENS,
                                                                settings.max_new_tokens))

    def _warm(self, calls: Callable[[], Any]) -> None:
        """Run `calls` twice (CUDA graphs are recorded on a later call than the one that
        compiles); `warmup_s` is the time taken. A failure fails the load."""
        start = time.monotonic()
        try:
            for _ in range(2):
                calls()
        except EmbodiedRError as exc:
            raise ModelUnavailableError(
                f"model {self.spec.model!r} (backend transformers): warm-up failed: {exc}"
            ) from exc
        self.warmup_s = time.monotonic() - start

    def _move(self, batch: Any) -> dict[str, Any]:
        device = self.device if "device_map" not in self.spec.extra else self._first_device()
        return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in dict(batch).items()}

    def _first_device(self) -> Any:
        return next(self._model.parameters()).device  # type: ignore[attr-defined]

    def close(self) -> None:
        """Drop the model; later calls raise a backend error."""
        with self._lock:
            self._closed = True
            self._model = None
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - best effort
            pass


# -------------------------------------------------------------------------- perceiver
class TransformersPerceiver(_TransformersBase):
    """Images + prompt -> text with a Qwen2.5-VL-style model, in-process."""

    _error_cls = PerceptionError

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        from transformers import AutoModelForImageTextToText, AutoProcessor

        try:
            self._processor = AutoProcessor.from_pretrained(
                self.source, trust_remote_code=spec.trust_remote_code, **self._processor_kwargs()
            )
        except Exception as exc:  # noqa: BLE001
            raise _load_error(spec, self.source, "the processor", exc) from exc
        if not hasattr(self._processor, "image_processor"):
            raise ModelUnavailableError(
                f"model {spec.model!r} (backend transformers): {self.source} has no image "
                "processor, so it is not a vision-language model"
            )
        try:
            model = AutoModelForImageTextToText.from_pretrained(self.source, **self._model_kwargs())
        except Exception as exc:  # noqa: BLE001
            raise _load_error(spec, self.source, "an image-text-to-text model", exc) from exc
        self._finish(model)

    @classmethod
    def from_loaded(cls, spec: ModelSpec, model: Any, processor: Any) -> TransformersPerceiver:
        """A perceiver around a model and processor already in memory (benchmarks build
        random-weight models at published shapes this way); `spec` gives the rest."""
        self = cls.__new__(cls)
        _TransformersBase.__init__(self, spec, source="<in memory>")
        self._processor = processor
        self._finish(model)
        return self

    def _finish(self, model: Any) -> None:
        self._model = self._place(model)
        tokenizer = self._processor.tokenizer
        tokenizer.padding_side = "left"
        self._eos, self._pad = _eos_and_pad(self._model, tokenizer)
        if tokenizer.pad_token_id is None and self._pad is not None:
            tokenizer.pad_token_id = self._pad
        if self.spec.warmup:
            self.warmup()

    def warmup(self) -> None:
        """Describe a synthetic frame alone and a full batch of pairs, so the shapes the
        robot uses (one image; `batch_size` requests of two images) are compiled."""
        rng = np.random.default_rng(0)
        frame = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
        settings = self._warmup_settings()
        pair: PerceptionRequest = ([frame, frame], "Warm-up: describe the change.")

        def calls() -> None:
            self.describe([frame], "Warm-up: describe the scene.", settings)
            self.describe_batch([pair] * self.spec.batch_size, settings)

        self._warm(calls)

    def _prompt_text(self, n_images: int, prompt: str) -> str:
        # Prompt text first, then the images: the reference's order (docs/method.md §3).
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        content.extend({"type": "image"} for _ in range(n_images))
        return self._processor.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )

    def describe(
        self,
        images: Sequence[np.ndarray],
        prompt: str,
        settings: GenerationSettings | None = None,
    ) -> str:
        """Describe `images` (in order) following `prompt`."""
        return self.describe_batch([(images, prompt)], settings)[0]

    def describe_batch(
        self,
        requests: Sequence[PerceptionRequest],
        settings: GenerationSettings | None = None,
    ) -> list[str]:
        """Several requests, generated `batch_size` at a time with left padding."""
        settings = settings or self.spec.settings()
        results: list[str] = []
        for chunk in _chunks(list(requests), self.spec.batch_size):
            texts, pil_images = [], []
            for images, prompt in chunk:
                pils = model_images(images, self.spec.image_encoding())
                pil_images.extend(pils)
                texts.append(self._prompt_text(len(pils), prompt))
            try:
                batch = self._processor(
                    text=texts,
                    images=pil_images or None,
                    padding=True,
                    return_tensors="pt",
                )
            except Exception as exc:  # noqa: BLE001
                raise PerceptionError(
                    f"{self.name}: could not prepare the inputs: {type(exc).__name__}: {exc}"
                ) from exc
            inputs = self._move(batch)
            output = self._run_generate(self._model, inputs, settings, self._eos, self._pad)
            new_tokens = output[:, inputs["input_ids"].shape[1] :]
            results.extend(
                self._processor.batch_decode(
                    new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False
                )
            )
        return results


# --------------------------------------------------------------------------- reasoner
class TransformersReasoner(_TransformersBase):
    """Chat messages -> text with a causal LM (or a Qwen2.5-VL used on text only)."""

    _error_cls = ReasoningError

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        self.text_only_vlm = is_vision_checkpoint(self.source)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(
                self.source, trust_remote_code=spec.trust_remote_code
            )
        except Exception as exc:  # noqa: BLE001
            raise _load_error(spec, self.source, "the tokenizer", exc) from exc
        loader: Callable[..., Any] = (
            AutoModelForImageTextToText.from_pretrained
            if self.text_only_vlm
            else AutoModelForCausalLM.from_pretrained
        )
        what = "a Qwen2.5-VL model (text-only use)" if self.text_only_vlm else "a causal LM"
        try:
            model = loader(self.source, **self._model_kwargs())
        except Exception as exc:  # noqa: BLE001
            raise _load_error(spec, self.source, what, exc) from exc
        self._finish(model)

    @classmethod
    def from_loaded(cls, spec: ModelSpec, model: Any, tokenizer: Any) -> TransformersReasoner:
        """A reasoner around a model and tokenizer already in memory (see the perceiver's)."""
        self = cls.__new__(cls)
        _TransformersBase.__init__(self, spec, source="<in memory>")
        self.text_only_vlm = getattr(model.config, "model_type", "") in VISION_MODEL_TYPES
        self._tokenizer = tokenizer
        self._finish(model)
        return self

    def _finish(self, model: Any) -> None:
        self._model = self._place(model)
        self._tokenizer.padding_side = "left"
        self._eos, self._pad = _eos_and_pad(self._model, self._tokenizer)
        if self._tokenizer.pad_token_id is None and self._pad is not None:
            self._tokenizer.pad_token_id = self._pad
        if self.spec.warmup:
            self.warmup()

    def warmup(self) -> None:
        """Answer a short question, so the first real one does not pay compilation."""
        messages: list[ChatMessage] = [
            {"role": "user", "content": "Warm-up: frame 0 shows a red box ahead-left. "
                                        "Where is the red box?"}]
        settings = self._warmup_settings()
        self._warm(lambda: self.generate(messages, settings))

    def _render(self, messages: Sequence[ChatMessage]) -> str:
        plain = [{"role": m["role"], "content": _text_of(m.get("content"))} for m in messages]
        try:
            return str(self._tokenizer.apply_chat_template(plain, tokenize=False,
                                                           add_generation_prompt=True))
        except Exception as exc:  # noqa: BLE001
            raise ReasoningError(
                f"{self.name}: chat template failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _encode(self, texts: list[str]) -> dict[str, Any]:
        batch = self._tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        return self._move(batch)

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Prompt length in tokens after the chat template (for budgeting)."""
        return len(self._tokenizer(self._render(messages), add_special_tokens=False)["input_ids"])

    def count_text_tokens(self, text: str) -> int:
        """Tokens of a plain text (request limits)."""
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(
        self,
        messages: Sequence[ChatMessage],
        settings: GenerationSettings | None = None,
        on_text: TextCallback | None = None,
        should_stop: StopCheck | None = None,
    ) -> str:
        """Answer one conversation; stream pieces to `on_text`; poll `should_stop`.

        Raises CancelledError when `should_stop()` turned true, RequestTimeoutError past
        `timeout_s`, ReasoningError on other failures.
        """
        settings = settings or self.spec.settings()
        inputs = self._encode([self._render(messages)])
        streamer = _CallbackStreamer(self._tokenizer, on_text) if on_text is not None else None
        output = self._run_generate(
            self._model, inputs, settings, self._eos, self._pad, streamer, should_stop
        )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return str(self._tokenizer.decode(
            new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        )

    def generate_batch(
        self,
        conversations: Sequence[Sequence[ChatMessage]],
        settings: GenerationSettings | None = None,
    ) -> list[str]:
        """Answer several conversations, `batch_size` at a time, left-padded."""
        settings = settings or self.spec.settings()
        results: list[str] = []
        for chunk in _chunks(list(conversations), self.spec.batch_size):
            inputs = self._encode([self._render(conv) for conv in chunk])
            output = self._run_generate(self._model, inputs, settings, self._eos, self._pad)
            new_tokens = output[:, inputs["input_ids"].shape[1] :]
            results.extend(
                self._tokenizer.batch_decode(
                    new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False
                )
            )
        return results

"""In-process vLLM backends (CUDA GPU only; `vllm` is an optional extra).

`vllm` is imported when a backend is constructed, never at module import, so this module
imports on any machine. Without vllm or without a CUDA GPU, construction raises a
ModelUnavailableError that says so (no fallback to another backend).

Everything that turns our inputs into vLLM requests is a pure function here
(`sampling_params_kwargs`, `engine_kwargs`, `perception_messages`, `multimodal_prompt`,
`render_prompt`, `perception_batch`) and so is the token-streaming loop over an engine
(`stream_request`); they are unit-tested without vllm. Only the thin classes below touch
vllm itself.

Batched perception: the robot's worker hands several key frames to `describe_batch` at
once; they go to the engine as one `LLM.generate` call with a list of prompt dicts
(`{"prompt": text, "multi_modal_data": {"image": [previous, current]}}`), which vLLM's
scheduler decodes together. The engine is started with `limit_mm_per_prompt={"image": 2}`
(frame 0 has one image, every later key frame two); a request with more images than the
limit is refused before it reaches the engine.

Streaming and cancellation use the engine's step loop (`add_request` / `step` /
`abort_request`), so `on_text` receives text as it is generated and `should_stop` is
polled between steps.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from embodied_r_ros.core.backends.base import PerceptionRequest, StopCheck, TextCallback
from embodied_r_ros.core.backends.images import ImageEncoding, model_images
from embodied_r_ros.core.backends.model_spec import ModelSpec, locate_model
from embodied_r_ros.core.errors import (
    CancelledError,
    EmbodiedRError,
    ModelUnavailableError,
    PerceptionError,
    ReasoningError,
)
from embodied_r_ros.core.types import ChatMessage, GenerationSettings

# Images per perception request: frame 0 has one, every later key frame two.
DEFAULT_MAX_IMAGES = 2
_request_ids = itertools.count()


# ---------------------------------------------------------------- pure request building
def sampling_params_kwargs(settings: GenerationSettings) -> dict[str, Any]:
    """Keyword arguments for `vllm.SamplingParams` (temperature 0 is greedy in vLLM)."""
    kwargs: dict[str, Any] = {
        "max_tokens": int(settings.max_new_tokens),
        "temperature": float(settings.temperature),
        "top_p": float(settings.top_p) if settings.temperature > 0 else 1.0,
    }
    if settings.seed is not None:
        kwargs["seed"] = int(settings.seed)
    return kwargs


def engine_kwargs(spec: ModelSpec, source: str, max_images: int | None) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM`; `spec.extra` is merged last (it wins)."""
    kwargs: dict[str, Any] = {
        "model": source,
        "dtype": spec.dtype,  # vLLM understands auto / bfloat16 / float16 / float32
        "trust_remote_code": spec.trust_remote_code,
    }
    if spec.seed is not None:
        kwargs["seed"] = int(spec.seed)
    if max_images is not None:
        kwargs["limit_mm_per_prompt"] = {"image": int(max_images)}
    kwargs.update(spec.extra)
    return kwargs


def perception_messages(n_images: int, prompt: str) -> list[ChatMessage]:
    """Chat messages for one perception request: the prompt, then image placeholders.

    Text before images is the reference's order (docs/method.md §3).
    """
    content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    content.extend({"type": "image"} for _ in range(n_images))
    return [{"role": "user", "content": content}]


def render_prompt(renderer: Any, messages: Sequence[ChatMessage]) -> str:
    """Prompt text from a processor/tokenizer that has `apply_chat_template`."""
    return renderer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


def multimodal_prompt(text: str, images: Sequence[Any]) -> dict[str, Any]:
    """A vLLM prompt dict: the rendered text plus its images (in placeholder order)."""
    prompt: dict[str, Any] = {"prompt": text}
    if len(images) == 1:
        prompt["multi_modal_data"] = {"image": images[0]}
    elif images:
        prompt["multi_modal_data"] = {"image": list(images)}
    return prompt


def image_limit(engine_options: dict[str, Any]) -> int | None:
    """Images per prompt the engine accepts (its `limit_mm_per_prompt`), None if unset."""
    limit = engine_options.get("limit_mm_per_prompt")
    if isinstance(limit, dict) and limit.get("image") is not None:
        return int(limit["image"])
    return None


def perception_batch(renderer: Any, requests: Sequence[PerceptionRequest],
                     encoding: ImageEncoding, max_images: int | None) -> list[dict[str, Any]]:
    """The prompt dicts of one batched `LLM.generate` call, in request order.

    Each request's images are encoded as every backend encodes them (`model_images`) and
    keep their order (previous key frame, then current). Raises PerceptionError for a
    request without images or with more than `max_images`.
    """
    prompts = []
    for position, (images, prompt) in enumerate(requests):
        if not images:
            raise PerceptionError(f"perception request {position} has no image")
        if max_images is not None and len(images) > max_images:
            raise PerceptionError(
                f"perception request {position} has {len(images)} images but the vLLM engine "
                f"takes at most {max_images} per prompt (limit_mm_per_prompt); raise "
                "extra.limit_mm_per_prompt.image")
        pils = model_images(images, encoding)
        prompts.append(multimodal_prompt(
            render_prompt(renderer, perception_messages(len(pils), prompt)), pils))
    return prompts


def text_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Messages with list contents reduced to their text parts (reasoning is text-only)."""
    plain = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
            )
        plain.append({"role": message["role"], "content": "" if content is None else content})
    return plain


def stream_request(
    engine: Any,
    request_id: str,
    prompt: Any,
    params: Any,
    on_text: TextCallback | None,
    should_stop: StopCheck | None,
) -> str:
    """Run one request on an engine step by step; stream text; honour `should_stop`.

    `engine` needs `add_request(id, prompt, params)`, `step() -> outputs`,
    `has_unfinished_requests()` and `abort_request(ids)` (vLLM's LLMEngine). Outputs
    carry cumulative text (`outputs[0].text`); new text goes to `on_text`.
    """
    engine.add_request(request_id, prompt, params)
    sent = ""
    final = ""
    try:
        while engine.has_unfinished_requests():
            if should_stop is not None and should_stop():
                engine.abort_request([request_id])
                raise CancelledError(f"vllm request {request_id}: cancelled by the caller")
            for output in engine.step():
                if str(output.request_id) != request_id or not output.outputs:
                    continue
                final = output.outputs[0].text
                if on_text is not None and len(final) > len(sent) and final.startswith(sent):
                    on_text(final[len(sent):])
                    sent = final
    except CancelledError:
        raise
    except BaseException:
        try:
            engine.abort_request([request_id])
        except Exception:  # noqa: BLE001 - already failing
            pass
        raise
    if on_text is not None and final != sent and final.startswith(sent):
        on_text(final[len(sent):])
    return final


def require_vllm(spec: ModelSpec) -> Any:
    """Import vllm and check for a CUDA GPU, or raise ModelUnavailableError."""
    where = f"model {spec.model!r} (backend vllm)"
    if spec.device == "cpu" or spec.device == "mps":
        raise ModelUnavailableError(f"{where}: vLLM needs a CUDA GPU, but device={spec.device!r}")
    try:
        import vllm
    except ImportError as exc:
        raise ModelUnavailableError(
            f"{where}: the vllm package is not installed ({exc}); install it on a CUDA "
            "machine or use backend 'transformers' or 'openai'"
        ) from exc
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        raise ModelUnavailableError(f"{where}: vLLM needs a CUDA GPU and none is available")
    return vllm


# ----------------------------------------------------------------------- the backends
class _VLLMBase:
    _error_cls: type[EmbodiedRError] = ReasoningError
    _max_images: int | None = None

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = f"vllm:{spec.model}"
        self._vllm = require_vllm(spec)
        self.source = locate_model(spec)
        self._lock = threading.Lock()
        self.engine_options = engine_kwargs(spec, self.source, self._max_images)
        try:
            self._llm = self._vllm.LLM(**self.engine_options)
        except Exception as exc:  # noqa: BLE001
            raise ModelUnavailableError(
                f"model {spec.model!r} (backend vllm): engine failed to load {self.source}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._renderer = self._load_renderer()

    def _load_renderer(self) -> Any:
        return self._llm.get_tokenizer()

    def _params(self, settings: GenerationSettings | None) -> Any:
        return self._vllm.SamplingParams(**sampling_params_kwargs(settings or self.spec.settings()))

    def _generate_all(self, prompts: list[Any], settings: GenerationSettings | None) -> list[str]:
        params = self._params(settings)
        results: list[str] = []
        with self._lock:
            for start in range(0, len(prompts), self.spec.batch_size):
                chunk = prompts[start : start + self.spec.batch_size]
                try:
                    outputs = self._llm.generate(chunk, params, use_tqdm=False)
                except Exception as exc:  # noqa: BLE001
                    raise self._error_cls(f"{self.name}: generation failed: {type(exc).__name__}: {exc}") from exc
                results.extend(out.outputs[0].text if out.outputs else "" for out in outputs)
        return results

    def _stream(self, prompt: Any, settings: GenerationSettings | None, on_text: TextCallback | None,
                should_stop: StopCheck | None) -> str:
        params = self._params(settings)
        request_id = f"er-{next(_request_ids)}"
        with self._lock:
            try:
                return stream_request(self._llm.llm_engine, request_id, prompt, params, on_text, should_stop)
            except EmbodiedRError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise self._error_cls(f"{self.name}: generation failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._llm = None


class VLLMPerceiver(_VLLMBase):
    """Images + prompt -> text with a vision-language model on vLLM."""

    _error_cls = PerceptionError
    _max_images: int | None = DEFAULT_MAX_IMAGES

    def __init__(self, spec: ModelSpec) -> None:
        if "limit_mm_per_prompt" in spec.extra:
            self._max_images = None  # the user's value in extra is used as is
        super().__init__(spec)

    def _load_renderer(self) -> Any:
        # The HF processor's chat template knows the vision placeholders.
        try:
            from transformers import AutoProcessor

            return AutoProcessor.from_pretrained(self.source, trust_remote_code=self.spec.trust_remote_code)
        except Exception:  # noqa: BLE001 - the engine's tokenizer is the fallback template
            return self._llm.get_tokenizer()

    def describe(self, images: Sequence[np.ndarray], prompt: str, settings: GenerationSettings | None = None) -> str:
        return self.describe_batch([(images, prompt)], settings)[0]

    def describe_batch(self, requests: Sequence[PerceptionRequest],
                       settings: GenerationSettings | None = None) -> list[str]:
        """All requests in `LLM.generate` calls of up to `batch_size` prompts each."""
        prompts = perception_batch(self._renderer, requests, self.spec.image_encoding(),
                                   image_limit(self.engine_options))
        return self._generate_all(prompts, settings)


class VLLMReasoner(_VLLMBase):
    """Chat messages -> text on vLLM (a Qwen2.5-VL checkpoint is used on text only)."""

    _error_cls = ReasoningError

    def _prompt(self, messages: Iterable[ChatMessage]) -> dict[str, Any]:
        return {"prompt": render_prompt(self._renderer, text_messages(list(messages)))}

    def generate(
        self,
        messages: Sequence[ChatMessage],
        settings: GenerationSettings | None = None,
        on_text: TextCallback | None = None,
        should_stop: StopCheck | None = None,
    ) -> str:
        prompt = self._prompt(messages)
        if on_text is None and should_stop is None:
            return self._generate_all([prompt], settings)[0]
        return self._stream(prompt, settings, on_text, should_stop)

    def generate_batch(
        self, conversations: Sequence[Sequence[ChatMessage]], settings: GenerationSettings | None = None
    ) -> list[str]:
        return self._generate_all([self._prompt(c) for c in conversations], settings)


__all__: list[str] = [
    "VLLMPerceiver",
    "VLLMReasoner",
    "engine_kwargs",
    "image_limit",
    "multimodal_prompt",
    "perception_batch",
    "perception_messages",
    "render_prompt",
    "require_vllm",
    "sampling_params_kwargs",
    "stream_request",
    "text_messages",
]

"""vLLM backend without vLLM: this machine has no GPU and no vllm package.

What is tested for real: the clear ModelUnavailableError when vllm or CUDA is missing
(through the factory), and the pure request-building functions, with the tiny model's
real processor rendering the prompt. The only stand-in is `_FakeEngine`, a mock of
vLLM's LLMEngine step loop used to test streaming and cancellation in `stream_request`.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
from embodied_r_ros.core.backends.images import ImageEncoding, model_images
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.backends.vllm_backend import (
    engine_kwargs,
    multimodal_prompt,
    perception_messages,
    render_prompt,
    sampling_params_kwargs,
    stream_request,
    text_messages,
)
from embodied_r_ros.core.errors import CancelledError, ModelUnavailableError
from embodied_r_ros.core.types import GenerationSettings

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_missing_vllm_is_model_unavailable(tiny_models) -> None:
    for make in (make_perceiver, make_reasoner):
        with pytest.raises(ModelUnavailableError, match="vllm") as info:
            make(ModelSpec(backend="vllm", model=str(tiny_models.lm)))
        assert str(tiny_models.lm) in str(info.value)


def test_cpu_device_is_model_unavailable(tiny_models) -> None:
    with pytest.raises(ModelUnavailableError, match="CUDA GPU"):
        make_reasoner(ModelSpec(backend="vllm", model=str(tiny_models.lm), device="cpu"))


def test_sampling_params() -> None:
    greedy = sampling_params_kwargs(GenerationSettings(temperature=0.0, max_new_tokens=64, top_p=0.5))
    assert greedy == {"max_tokens": 64, "temperature": 0.0, "top_p": 1.0}
    sampled = sampling_params_kwargs(GenerationSettings(temperature=0.7, max_new_tokens=8, top_p=0.9, seed=5))
    assert sampled == {"max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": 5}


def test_engine_kwargs_merge_extra() -> None:
    spec = ModelSpec(
        backend="vllm",
        model="Qwen/Qwen2.5-VL-7B-Instruct",
        dtype="bfloat16",
        seed=1,
        extra={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8},
    )
    kwargs = engine_kwargs(spec, "/models/qwen", max_images=2)
    assert kwargs == {
        "model": "/models/qwen",
        "dtype": "bfloat16",
        "trust_remote_code": False,
        "seed": 1,
        "limit_mm_per_prompt": {"image": 2},
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.8,
    }
    assert "limit_mm_per_prompt" not in engine_kwargs(spec, "/m", max_images=None)


def test_multimodal_prompt_with_real_processor(tiny_models) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_models.vlm)
    frames = [np.zeros((240, 320, 3), np.uint8), np.full((240, 320, 3), 200, np.uint8)]
    pils = model_images(frames, ImageEncoding(max_side=160))
    text = render_prompt(processor, perception_messages(2, "What changed?"))
    assert text.count("<|image_pad|>") == 2 and text.endswith("assistant\n")
    # The prompt text comes before the images, as in the reference's requests.
    assert text.index("What changed?") < text.index("<|vision_start|>")
    prompt = multimodal_prompt(text, pils)
    assert prompt["prompt"] == text and prompt["multi_modal_data"]["image"] == pils
    assert pils[0].size == (160, 120)
    single = multimodal_prompt(text, pils[:1])
    assert single["multi_modal_data"]["image"] is pils[0]
    assert "multi_modal_data" not in multimodal_prompt("x", [])


def test_text_messages_drop_non_text_parts() -> None:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    assert text_messages(messages) == [{"role": "user", "content": "hi"}]


class _FakeEngine:
    """Mock of vLLM's LLMEngine step loop: emits cumulative text one word per step."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.steps = 0
        self.aborted: list[str] = []
        self.request_id = ""

    def add_request(self, request_id, prompt, params) -> None:
        self.request_id = request_id

    def has_unfinished_requests(self) -> bool:
        return not self.aborted and self.steps < len(self.words)

    def step(self):
        self.steps += 1
        text = "".join(self.words[: self.steps])
        return [SimpleNamespace(request_id=self.request_id, outputs=[SimpleNamespace(text=text)])]

    def abort_request(self, ids) -> None:
        self.aborted.extend(ids)


def test_stream_request_streams_pieces() -> None:
    engine = _FakeEngine(["<think>", "a", " b", "</think>", "<answer>A</answer>"])
    pieces: list[str] = []
    text = stream_request(engine, "r1", {"prompt": "p"}, None, pieces.append, None)
    assert text == "<think>a b</think><answer>A</answer>"
    assert pieces == engine.words


def test_stream_request_cancels() -> None:
    engine = _FakeEngine(["a"] * 10)
    pieces: list[str] = []
    with pytest.raises(CancelledError):
        stream_request(engine, "r2", {"prompt": "p"}, None, pieces.append, lambda: len(pieces) >= 3)
    assert engine.aborted == ["r2"] and len(pieces) == 3

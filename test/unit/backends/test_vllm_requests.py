"""Batched multi-image perception requests for vLLM's offline API, built without vLLM.

vLLM cannot run here (no GPU, no vllm package), so this tests the request building, not
the engine: `perception_batch` with the tiny model's real processor, and
`VLLMPerceiver.describe_batch` against a stand-in `vllm` module that records what the
backend hands to `vllm.LLM(...)` and `LLM.generate(...)`. The engine itself is measured
only on a GPU machine (not yet: see docs/gpu.md).
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from embodied_r_ros.core.backends.images import ImageEncoding
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.backends.vllm_backend import image_limit, perception_batch
from embodied_r_ros.core.errors import PerceptionError
from embodied_r_ros.core.perception.worker import keyframe_request


def _frames(n: int) -> list[np.ndarray]:
    return [np.full((120, 160, 3), 40 * (i + 1), np.uint8) for i in range(n)]


@pytest.fixture(scope="module")
def processor(tiny_models: Any) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_models.vlm)


def test_image_limit() -> None:
    assert image_limit({"limit_mm_per_prompt": {"image": 2}}) == 2
    assert image_limit({"limit_mm_per_prompt": {"video": 1}}) is None
    assert image_limit({}) is None


@pytest.mark.models
def test_a_batch_of_key_frames_becomes_one_list_of_prompt_dicts(processor: Any) -> None:
    frames = _frames(4)
    requests = [keyframe_request(frames[0], None)] + [
        keyframe_request(frames[i], frames[i - 1]) for i in range(1, 4)]
    prompts = perception_batch(processor, requests, ImageEncoding(), max_images=2)
    assert len(prompts) == 4
    first, *pairs = prompts
    assert first["prompt"].count("<|image_pad|>") == 1
    assert first["multi_modal_data"]["image"].size == (160, 120)  # one image: not a list
    for i, prompt in enumerate(pairs, start=1):
        images = prompt["multi_modal_data"]["image"]
        assert prompt["prompt"].count("<|image_pad|>") == 2 and len(images) == 2
        # previous key frame first, then the current one (JPEG round trip: about equal)
        assert abs(int(np.asarray(images[0])[0, 0, 0]) - 40 * i) <= 2
        assert abs(int(np.asarray(images[1])[0, 0, 0]) - 40 * (i + 1)) <= 2
        assert prompt["prompt"].endswith("assistant\n")


@pytest.mark.models
def test_requests_over_the_engine_image_limit_are_refused(processor: Any) -> None:
    three = (_frames(3), "What changed?")
    with pytest.raises(PerceptionError, match="at most 2 per prompt"):
        perception_batch(processor, [three], ImageEncoding(), max_images=2)
    with pytest.raises(PerceptionError, match="no image"):
        perception_batch(processor, [([], "x")], ImageEncoding(), max_images=2)
    assert len(perception_batch(processor, [three], ImageEncoding(), max_images=None)) == 1


class _StandInLLM:
    """Records the engine options and each generate call; answers with the call order."""

    made: list[_StandInLLM] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.calls: list[list[dict[str, Any]]] = []
        _StandInLLM.made.append(self)

    def get_tokenizer(self) -> Any:
        raise AssertionError("the processor's chat template should be used")

    def generate(self, prompts: list[dict[str, Any]], params: Any, use_tqdm: bool = True) -> Any:
        self.calls.append(list(prompts))
        return [SimpleNamespace(outputs=[SimpleNamespace(text=f"text {len(self.calls)}.{i}")])
                for i in range(len(prompts))]


@pytest.mark.models
def test_vllm_perceiver_sends_the_worker_batch_in_one_generate_call(
        tiny_models: Any, monkeypatch: Any) -> None:
    import torch

    from embodied_r_ros.core.backends.vllm_backend import VLLMPerceiver

    fake = ModuleType("vllm")
    fake.LLM = _StandInLLM  # type: ignore[attr-defined]
    fake.SamplingParams = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _StandInLLM.made.clear()

    perceiver = VLLMPerceiver(ModelSpec(backend="vllm", model=str(tiny_models.vlm),
                                        batch_size=4, max_new_tokens=64))
    engine = _StandInLLM.made[0]
    assert engine.options["limit_mm_per_prompt"] == {"image": 2}
    frames = _frames(5)
    requests = [keyframe_request(frames[i], frames[i - 1] if i else None) for i in range(5)]
    texts = perceiver.describe_batch(requests)
    assert texts == ["text 1.0", "text 1.1", "text 1.2", "text 1.3", "text 2.0"]
    assert [len(call) for call in engine.calls] == [4, 1]  # chunks of batch_size
    assert [p["prompt"].count("<|image_pad|>") for p in engine.calls[0]] == [1, 2, 2, 2]
    with pytest.raises(PerceptionError, match="at most 2"):
        perceiver.describe(_frames(3), "three images")

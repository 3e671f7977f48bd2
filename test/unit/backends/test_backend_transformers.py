"""In-process transformers backends on the tiny models (real loading, real generate)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from embodied_r_ros.core.backends.base import Perceiver, Reasoner
from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.backends.transformers_backend import TransformersReasoner
from embodied_r_ros.core.errors import (
    CancelledError,
    InvalidRequestError,
    ModelUnavailableError,
    RequestTimeoutError,
)
from embodied_r_ros.core.types import GenerationSettings

GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=12)
MESSAGES = [
    {"role": "system", "content": "Think inside <think></think>, answer inside <answer></answer>."},
    {"role": "user", "content": "Question: Which is closer?\nChoices:\nA. lamp\nB. sofa"},
]


def _frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(240, 320, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def perceiver(tiny_models):
    p = make_perceiver(ModelSpec(model=str(tiny_models.vlm), device="cpu", max_new_tokens=8))
    yield p
    p.close()


@pytest.fixture(scope="module")
def reasoner(tiny_models):
    r = make_reasoner(ModelSpec(model=str(tiny_models.lm), device="cpu", max_new_tokens=12))
    yield r
    r.close()


def test_protocols(perceiver, reasoner) -> None:
    assert isinstance(perceiver, Perceiver)
    assert isinstance(reasoner, Reasoner)


def test_perceiver_one_and_two_images(perceiver) -> None:
    one = perceiver.describe(_frames(1), "Describe the scene.", GREEDY)
    two = perceiver.describe(_frames(2), "What changed between the two views?", GREEDY)
    assert isinstance(one, str) and one
    assert isinstance(two, str) and two


def test_perceiver_batch_matches_single(perceiver) -> None:
    frames = _frames(2, seed=3)
    requests = [(frames[:1], "Describe the scene."), (frames, "What changed?")]
    batch = perceiver.describe_batch(requests, GREEDY)
    single = [perceiver.describe(imgs, prompt, GREEDY) for imgs, prompt in requests]
    assert batch == single


def test_perceiver_downscales_large_images(tiny_models) -> None:
    p = make_perceiver(
        ModelSpec(model=str(tiny_models.vlm), device="cpu", max_image_side=64, max_new_tokens=4)
    )
    try:
        big = np.zeros((1080, 1920, 3), dtype=np.uint8)
        assert isinstance(p.describe([big], "Describe.", None), str)
    finally:
        p.close()


def test_perceiver_puts_the_prompt_before_the_images(perceiver) -> None:
    """The reference's message order: the prompt text, then image 1, image 2."""
    text = perceiver._prompt_text(2, "What changed?")
    assert text.count("<|vision_start|>") == 2
    assert text.index("What changed?") < text.index("<|vision_start|>")


def test_perceiver_rejects_bad_image(perceiver) -> None:
    with pytest.raises(InvalidRequestError):
        perceiver.describe([np.zeros((10, 10), dtype=np.uint8)], "Describe.", GREEDY)


def test_reasoner_greedy_is_deterministic(reasoner) -> None:
    first = reasoner.generate(MESSAGES, GREEDY)
    second = reasoner.generate(MESSAGES, GREEDY)
    assert first == second
    assert first


def test_reasoner_seeded_sampling_repeats(reasoner) -> None:
    settings = GenerationSettings(temperature=1.0, max_new_tokens=12, seed=7)
    assert reasoner.generate(MESSAGES, settings) == reasoner.generate(MESSAGES, settings)


def test_streaming_pieces_concatenate_to_result(reasoner) -> None:
    pieces: list[str] = []
    result = reasoner.generate(MESSAGES, GenerationSettings(max_new_tokens=24), on_text=pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == result


def test_should_stop_cancels(reasoner) -> None:
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) >= 3

    with pytest.raises(CancelledError):
        reasoner.generate(MESSAGES, GenerationSettings(max_new_tokens=50), should_stop=stop)
    assert len(calls) >= 3


def test_timeout_raises(tiny_models) -> None:
    r = make_reasoner(ModelSpec(model=str(tiny_models.lm), device="cpu", timeout_s=1e-6))
    try:
        with pytest.raises(RequestTimeoutError):
            r.generate(MESSAGES, GenerationSettings(max_new_tokens=8))
    finally:
        r.close()


def test_batch_matches_single(reasoner) -> None:
    conversations = [
        MESSAGES,
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "A much longer question about the red box on the left?"}],
    ]
    batch = reasoner.generate_batch(conversations, GREEDY)
    assert batch == [reasoner.generate(c, GREEDY) for c in conversations]


def test_reasoner_is_thread_safe(reasoner) -> None:
    expected = reasoner.generate(MESSAGES, GREEDY)
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(reasoner.generate(MESSAGES, GREEDY)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 3


def test_vlm_checkpoint_as_text_reasoner(tiny_models) -> None:
    """The released Embodied-R weights are a Qwen2.5-VL: it must serve as a text reasoner."""
    r = make_reasoner(ModelSpec(model=str(tiny_models.vlm), device="cpu"))
    try:
        assert isinstance(r, TransformersReasoner) and r.text_only_vlm
        assert r.generate(MESSAGES, GREEDY) == r.generate(MESSAGES, GREEDY)
    finally:
        r.close()


def test_missing_path_is_model_unavailable(tmp_path) -> None:
    missing = tmp_path / "no_such_model"
    with pytest.raises(ModelUnavailableError, match=str(missing)) as info:
        make_reasoner(ModelSpec(model=str(missing)))
    assert "transformers" in str(info.value)
    with pytest.raises(ModelUnavailableError, match=str(missing)):
        make_perceiver(ModelSpec(model=str(missing)))


def test_folder_without_config_is_model_unavailable(tmp_path) -> None:
    with pytest.raises(ModelUnavailableError, match="not a model folder"):
        make_reasoner(ModelSpec(model=str(tmp_path)))


def test_uncached_hub_id_offline_is_model_unavailable(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="not in the local Hugging Face cache"):
        make_reasoner(ModelSpec(model="EmbodiedCity/Embodied-R-not-here"))


def test_lm_folder_is_not_a_perceiver(tiny_models) -> None:
    with pytest.raises(ModelUnavailableError, match=str(tiny_models.lm)):
        make_perceiver(ModelSpec(model=str(tiny_models.lm), device="cpu"))


# ------------------------------------------------------------------ ModelSpec (YAML keys)
def test_model_spec_from_dict_and_settings() -> None:
    spec = ModelSpec.from_dict(
        {
            "backend": "openai",
            "model": "Qwen/Qwen2.5-VL-72B-Instruct",
            "base_url": "http://gpu:8000/v1",
            "served_model_name": "qwen-vl",
            "timeout_s": 30,
            "temperature": 0.1,
            "max_new_tokens": 1024,
            "seed": 3,
            "max_image_side": 640,
            "image_format": "png",
            "jpeg_quality": 90,
        }
    )
    assert spec.timeout_s == 30.0 and isinstance(spec.timeout_s, float)
    assert spec.request_model_name == "qwen-vl"
    assert spec.settings() == GenerationSettings(temperature=0.1, max_new_tokens=1024, top_p=1.0, seed=3)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert ModelSpec(model="m").request_model_name == "m"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"model": "m", "colour": "red"}, "colour"),
        ({"model": "m", "backend": "onnx"}, "backend"),
        ({"model": ""}, "model"),
        ({"model": "m", "device": "gpu0"}, "device"),
        ({"model": "m", "dtype": "int4"}, "dtype"),
        ({"model": "m", "backend": "openai"}, "base_url"),
        ({"model": "m", "backend": "openai", "base_url": "gpu:8000"}, "base_url"),
        ({"model": "m", "timeout_s": 0}, "timeout_s"),
        ({"model": "m", "timeout_s": "fast"}, "timeout_s"),
        ({"model": "m", "max_retries": -1}, "max_retries"),
        ({"model": "m", "max_retries": 1.5}, "max_retries"),
        ({"model": "m", "temperature": -0.1}, "temperature"),
        ({"model": "m", "max_new_tokens": 0}, "max_new_tokens"),
        ({"model": "m", "top_p": 1.5}, "top_p"),
        ({"model": "m", "max_image_side": -1}, "max_image_side"),
        ({"model": "m", "batch_size": 0}, "batch_size"),
        ({"model": "m", "trust_remote_code": "yes"}, "trust_remote_code"),
        ({"model": "m", "api_key_env": "not a name"}, "api_key_env"),
        ({"model": "m", "extra": [1]}, "extra"),
    ],
)
def test_model_spec_rejects_bad_values(data, key) -> None:
    from embodied_r_ros.core.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        ModelSpec.from_dict(data)


def test_processor_kwargs_reach_the_processor(tiny_models) -> None:
    """extra.processor_kwargs sets the image token budget of a real processor."""
    p = make_perceiver(
        ModelSpec(
            model=str(tiny_models.vlm),
            device="cpu",
            max_new_tokens=2,
            extra={"processor_kwargs": {"size": {"shortest_edge": 3136, "longest_edge": 3136}}},
        )
    )
    try:
        size = p._processor.image_processor.size
        assert size["longest_edge"] == 3136
        assert isinstance(p.describe(_frames(1), "Describe.", None), str)
    finally:
        p.close()


def test_generate_kwargs_from_extra_reach_generate(tiny_models) -> None:  # type: ignore[no-untyped-def]
    """`extra.generate_kwargs` is passed to model.generate (and wins over the settings)."""
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.types import GenerationSettings

    def reply_tokens(extra: dict) -> int:
        reasoner = make_reasoner({"backend": "transformers", "model": str(tiny_models.lm),
                                  "device": "cpu", "dtype": "float32", "extra": extra})
        try:
            text = reasoner.generate([{"role": "user", "content": "hi"}],
                                     GenerationSettings(max_new_tokens=40))
            empty = reasoner.count_tokens([{"role": "assistant", "content": ""}])
            return reasoner.count_tokens([{"role": "assistant", "content": text}]) - empty
        finally:
            reasoner.close()

    plain = reply_tokens({})
    capped = reply_tokens({"generate_kwargs": {"max_new_tokens": 3}})
    assert capped * 3 < plain, (capped, plain)

"""The transformers backend's decoding fast path (ModelSpec kv_cache, max_cache_len,
compile, prompt_lookup_tokens, warmup): each option reaches `generate`, and greedy
output with it is exactly the plain path's, with the tiny models on the CPU.

`compile` runs here with `extra.compile_config: {backend: eager}` (TorchDynamo capture
without inductor code generation): the same transformers code path as on a GPU, at a
cost a CI job can pay. Whether it is faster is measured on a GPU (bench/decoding_speed.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.backends.transformers_backend import decoding_options
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.settings import build_settings

MESSAGES = [
    {"role": "system", "content": "Think first, then answer."},
    {"role": "user", "content": "Frame 0: Observe: a red box ahead-left, a blue door to the "
                                "right. Frame 1: After move forward, Observe: the red box is "
                                "closer, the blue door is to the right. Where is the door?"},
]
EAGER_COMPILE = {"compile_config": {"backend": "eager"}}


# ---------------------------------------------------------------- options -> generate
def test_plain_spec_adds_nothing_but_keeps_compilation_off() -> None:
    assert decoding_options(ModelSpec(model="m"), 1, 100, 64) == {"disable_compile": True}


def test_static_cache_and_its_length() -> None:
    spec = ModelSpec(model="m", kv_cache="static", max_cache_len=512, max_new_tokens=64)
    assert decoding_options(spec, 2, 100, 64) == {
        "cache_implementation": "static", "max_cache_len": 512, "disable_compile": True}
    # A call that does not fit sizes its own cache instead of failing.
    assert "max_cache_len" not in decoding_options(spec, 1, 500, 64)
    # Prompt lookup writes candidates past the answer: the cache leaves room for them.
    lookup = ModelSpec(model="m", kv_cache="static", prompt_lookup_tokens=10)
    assert decoding_options(lookup, 1, 100, 64)["max_cache_len"] == 100 + 64 + 11


def test_compile_and_prompt_lookup() -> None:
    spec = ModelSpec(model="m", kv_cache="static", compile=True, prompt_lookup_tokens=10,
                     extra={"compile_config": {"backend": "eager", "fullgraph": False}})
    single = decoding_options(spec, 1, 10, 8)
    assert single["prompt_lookup_num_tokens"] == 10 and "disable_compile" not in single
    assert single["compile_config"].backend == "eager"
    assert single["compile_config"]._compile_all_devices is True
    # Assisted decoding takes one sequence: a batch decodes plainly.
    assert "prompt_lookup_num_tokens" not in decoding_options(spec, 4, 10, 8)


@pytest.mark.parametrize("bad, message", [
    ({"compile": True}, "compile: needs kv_cache: static"),
    ({"kv_cache": "paged"}, "kv_cache: must be one of dynamic, static"),
    ({"kv_cache": "static", "max_cache_len": 64, "max_new_tokens": 64}, "max_cache_len"),
    ({"prompt_lookup_tokens": -1}, "prompt_lookup_tokens"),
])
def test_invalid_options_are_refused(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelSpec.from_dict({"model": "m", **bad})


def test_ros_parameters_reach_the_spec() -> None:
    settings = build_settings({"reasoning.model": "m", "reasoning.kv_cache": "static",
                               "reasoning.max_cache_len": 4096, "reasoning.compile": True,
                               "reasoning.prompt_lookup_tokens": 10, "reasoning.warmup": True})
    spec = ModelSpec.from_dict(settings.reasoning.spec_dict())
    assert (spec.kv_cache, spec.max_cache_len, spec.compile, spec.prompt_lookup_tokens,
            spec.warmup) == ("static", 4096, True, 10, True)
    plain = ModelSpec.from_dict(build_settings({"perception.model": "m"}).perception.spec_dict())
    assert (plain.kv_cache, plain.compile, plain.prompt_lookup_tokens, plain.warmup) == (
        "dynamic", False, 0, False)


# ------------------------------------------------------- identical greedy output, tiny
def _reasoner(path: Any, **options: Any) -> Any:
    from embodied_r_ros.core.backends.factory import make_reasoner

    return make_reasoner(ModelSpec(model=str(path), device="cpu", max_new_tokens=32, **options))


def _spy(backend: Any) -> list[Any]:
    """Record the GenerationConfig of every generate call of `backend`'s model."""
    seen: list[Any] = []
    model = backend._model
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["generation_config"])
        return original(*args, **kwargs)

    model.generate = generate
    return seen


@pytest.fixture(scope="module")
def plain_answer(tiny_models: Any) -> str:
    return str(_reasoner(tiny_models.lm).generate(MESSAGES))


@pytest.mark.models
@pytest.mark.parametrize("options", [
    {"kv_cache": "static"},
    {"kv_cache": "static", "max_cache_len": 512},
    {"prompt_lookup_tokens": 8},
    {"kv_cache": "static", "max_cache_len": 512, "compile": True, "extra": EAGER_COMPILE},
], ids=["static", "static-fixed-length", "prompt-lookup", "static-compiled"])
def test_reasoner_greedy_output_is_unchanged(tiny_models: Any, plain_answer: str,
                                             options: dict[str, Any]) -> None:
    reasoner = _reasoner(tiny_models.lm, **options)
    seen = _spy(reasoner)
    pieces: list[str] = []
    assert reasoner.generate(MESSAGES) == plain_answer
    assert reasoner.generate(MESSAGES, on_text=pieces.append) == plain_answer
    assert "".join(pieces) == plain_answer  # streaming still works
    config = seen[0]
    assert config.cache_implementation == options.get("kv_cache")
    assert config.prompt_lookup_num_tokens == options.get("prompt_lookup_tokens")
    assert (config.compile_config is not None) == bool(options.get("compile"))


@pytest.mark.models
def test_warmup_runs_at_load_and_changes_nothing(tiny_models: Any, plain_answer: str) -> None:
    reasoner = _reasoner(tiny_models.lm, kv_cache="static", max_cache_len=512,
                         prompt_lookup_tokens=8, warmup=True)
    assert reasoner.warmup_s > 0
    assert reasoner.generate(MESSAGES) == plain_answer
    assert _reasoner(tiny_models.lm).warmup_s == 0.0  # off by default


@pytest.mark.models
def test_text_only_vlm_reasoner_with_prompt_lookup(tiny_models: Any) -> None:
    # The released Embodied-R weights are a Qwen2.5-VL checkpoint used on text only.
    plain = _reasoner(tiny_models.vlm).generate(MESSAGES)
    fast = _reasoner(tiny_models.vlm, kv_cache="static", prompt_lookup_tokens=8)
    assert fast.text_only_vlm and fast.generate(MESSAGES) == plain


@pytest.mark.models
def test_perceiver_static_cache_batched_and_warmed(tiny_models: Any) -> None:
    from embodied_r_ros.core.backends.factory import make_perceiver

    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 255, (120, 160, 3), dtype=np.uint8) for _ in range(3)]
    requests = [([frames[0]], "Describe the scene."),
                ([frames[0], frames[1]], "What changed?"),
                ([frames[1], frames[2]], "What changed?")]

    def spec(**options: Any) -> ModelSpec:
        return ModelSpec(model=str(tiny_models.vlm), device="cpu", max_new_tokens=12,
                         **{"batch_size": 3, **options})

    plain = make_perceiver(spec())
    one_by_one = [plain.describe(images, prompt) for images, prompt in requests]
    fast = make_perceiver(spec(kv_cache="static", max_cache_len=256, warmup=True,
                               batch_size=2))
    assert fast.warmup_s > 0  # type: ignore[attr-defined]
    assert fast.describe_batch(requests) == one_by_one  # chunks of 2 and 1

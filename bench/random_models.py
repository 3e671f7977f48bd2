"""Backends for the GPU benchmarks: the real backend classes around models built here.

The GPU machine this project borrows has no network and no weights, so its benchmarks
run the published architectures with random weights (as bench/gpu_latency.py does). This
module puts such a model behind the project's real `TransformersPerceiver` /
`TransformersReasoner` (`from_loaded`), so a benchmark measures the robot's code path:
chat template, image encoding, processor, batching, decoding options.

Text goes through the tiny byte-level tokenizer built by embodied_r_ros.testing.tiny_models
(no download); the full-size model keeps its published vocabulary size, so the output
layer costs what it costs with real weights (ids the tiny tokenizer does not know decode
to nothing). Output lengths are pinned (min_new_tokens = max_new_tokens): random weights
would otherwise stop at a random place.

Sizes: "full" = Qwen2.5-VL-7B-Instruct and Qwen2.5-3B-Instruct shapes (a GPU);
"tiny" = the tiny model folders themselves, loaded as the robot loads a model (a CPU).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from embodied_r_ros.core.backends.model_spec import ModelSpec

SIZES = ("tiny", "full")


def tiny_folders(workdir: str | Path) -> Any:
    """The tiny model folders (built once, reused): tokenizers, processor, tiny models."""
    from embodied_r_ros.testing.tiny_models import build_tiny_models

    return build_tiny_models(Path(workdir) / "tiny_models")


def pinned(spec: ModelSpec) -> ModelSpec:
    """`spec` with output length pinned to max_new_tokens (random weights)."""
    extra = dict(spec.extra)
    extra["generate_kwargs"] = {**(extra.get("generate_kwargs") or {}),
                                "min_new_tokens": int(spec.max_new_tokens)}
    return dataclasses.replace(spec, extra=extra)


def _special_ids(tokenizer: Any) -> dict[str, int]:
    names = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
             "vision_start_token_id": "<|vision_start|>",
             "vision_end_token_id": "<|vision_end|>"}
    return {key: int(tokenizer.convert_tokens_to_ids(tok)) for key, tok in names.items()}


def perception_parts(size: str, spec: ModelSpec, folders: Any) -> tuple[Any, Any]:
    """(model, processor) of `size` ("tiny": the tiny folder; "full": 7B shapes)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from embodied_r_ros.core.backends.transformers_backend import resolve_device, resolve_dtype

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    processor = AutoProcessor.from_pretrained(str(folders.vlm))
    if size == "tiny":
        model = AutoModelForImageTextToText.from_pretrained(str(folders.vlm), dtype=dtype)
        return model.to(device).eval(), processor
    from bench.gpu_latency import QWEN25_VL_7B, build_vlm

    budget = QWEN25_VL_7B["image_processor"]
    processor.image_processor.min_pixels = budget["min_pixels"]
    processor.image_processor.max_pixels = budget["max_pixels"]
    processor.image_processor.size = {"shortest_edge": budget["min_pixels"],
                                      "longest_edge": budget["max_pixels"]}
    config = dict(QWEN25_VL_7B)
    config["tokens"] = {**_special_ids(processor.tokenizer), "first_special_id": 0}
    model = build_vlm(config, torch, device, dtype,
                      str(spec.extra.get("attn_implementation", "sdpa")))
    return model, processor


def reasoning_parts(size: str, spec: ModelSpec, folders: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of `size` ("tiny": the tiny folder; "full": 3B shapes)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from embodied_r_ros.core.backends.transformers_backend import resolve_device, resolve_dtype

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    tokenizer = AutoTokenizer.from_pretrained(str(folders.lm))
    if size == "tiny":
        model = AutoModelForCausalLM.from_pretrained(str(folders.lm), dtype=dtype)
        return model.to(device).eval(), tokenizer
    from bench.gpu_latency import QWEN25_3B, build_lm

    model = build_lm(QWEN25_3B, torch, device, dtype,
                     str(spec.extra.get("attn_implementation", "sdpa")))
    return model, tokenizer


def make_perceiver(size: str, spec: ModelSpec, folders: Any, parts: tuple[Any, Any] | None = None
                   ) -> Any:
    """A TransformersPerceiver around a model of `size` (or around `parts`, reused)."""
    from embodied_r_ros.core.backends.transformers_backend import TransformersPerceiver

    if size == "tiny" and parts is None:  # loaded exactly as the robot loads a folder
        return TransformersPerceiver(pinned(dataclasses.replace(spec, model=str(folders.vlm))))
    model, processor = parts or perception_parts(size, spec, folders)
    return TransformersPerceiver.from_loaded(pinned(spec), model, processor)


def make_reasoner(size: str, spec: ModelSpec, folders: Any, parts: tuple[Any, Any] | None = None
                  ) -> Any:
    """A TransformersReasoner around a model of `size` (or around `parts`, reused)."""
    from embodied_r_ros.core.backends.transformers_backend import TransformersReasoner

    if size == "tiny" and parts is None:
        return TransformersReasoner(pinned(dataclasses.replace(spec, model=str(folders.lm))))
    model, tokenizer = parts or reasoning_parts(size, spec, folders)
    return TransformersReasoner.from_loaded(pinned(spec), model, tokenizer)

"""Tokenizer and fresh tiny models of the real architectures for the mini world.

The tokenizer is a byte-level BPE (`core.tiny_models.build_tokenizer`) trained on the
texts the models read and write: the robot's prompts, the world's captions, questions
and worked answers. With a vocabulary of whole words the sequences stay short, which is
what makes training on a CPU affordable.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.testing.tiny_models import (
    CHAT_TEMPLATE,
    _generation_config,
    _padded_vocab,
    _token_ids,
    build_tokenizer,
)

# Image budget of the world VLM: a 320x240 frame becomes 224x168 pixels, 8x6 merged tokens.
VLM_MIN_PIXELS = 28 * 28 * 4
VLM_MAX_PIXELS = 28 * 28 * 48
VOCAB_SIZE = 1400


def prompt_corpus() -> list[str]:
    """Every shipped prompt text, rendered as the robot renders it."""
    from embodied_r_ros.core.prompts.perception import first_frame_prompt, pair_prompt
    from embodied_r_ros.core.prompts.prompt_set import PromptSet

    ps = PromptSet.default()
    texts = [first_frame_prompt(None), pair_prompt(None)]
    for key in ("reasoning.system", "reasoning.user", "reasoning.video_preamble",
                "consistency.system", "consistency.user"):
        texts.append(ps.text(key))
    return [t for t in texts if t]


def caption_corpus() -> list[str]:
    from embodied_r_ros.core.prompts.perception import ACTIONS
    from embodied_r_ros.sample_data.captions import POSITION_WORDS
    from embodied_r_ros.sample_data.world import COLOURS, SHAPES

    names = [f"{c} {s}" for c, s in itertools.product(COLOURS, [*SHAPES, "door"])]
    lines = [f"{n} {p}; {m} {q}." for (n, p), (m, q) in zip(
        itertools.product(names, POSITION_WORDS), itertools.product(reversed(names), POSITION_WORDS))]
    lines += [f"1. {a}\n2. new: {n} left.\n3. in view: {n} ahead." for a in ACTIONS for n in names[:8]]
    lines += ["nothing new.", "no objects in view.", "only walls, no objects."]
    return lines


def build_world_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Any:
    corpus = prompt_corpus() * 20 + caption_corpus() * 3 + list(texts)
    return build_tokenizer(vocab_size, corpus=corpus)


def new_vlm(folder: str | Path, tokenizer: Any, *, seed: int = 0, hidden: int = 128, layers: int = 3,
            vision_depth: int = 3, vision_hidden: int = 96) -> Path:
    """A freshly initialised Qwen2.5-VL with its processor, saved to `folder`."""
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    folder = Path(folder)
    ids = _token_ids(tokenizer)
    heads = 4
    head_dim = hidden // heads
    quarter = head_dim // 2
    mrope = [quarter - 2 * (quarter // 3), quarter // 3, quarter // 3]
    text_config = {
        "vocab_size": _padded_vocab(tokenizer), "hidden_size": hidden,
        "intermediate_size": hidden * 3, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": 2,
        "max_position_embeddings": 4096, "max_window_layers": layers,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    vision_config = {
        "depth": vision_depth, "hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_heads": 4,
        "out_hidden_size": hidden, "patch_size": 14, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": list(range(vision_depth)),
        "tokens_per_second": 2,
    }
    config = Qwen2_5_VLConfig(
        text_config=text_config, vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = _generation_config(ids)
    model.save_pretrained(folder)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=VLM_MIN_PIXELS, max_pixels=VLM_MAX_PIXELS),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(min_pixels=VLM_MIN_PIXELS, max_pixels=VLM_MAX_PIXELS),
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def new_lm(folder: str | Path, tokenizer: Any, *, seed: int = 0, hidden: int = 128, layers: int = 3,
           heads: int = 4, kv_heads: int = 2) -> Path:
    """A freshly initialised Qwen2 causal LM, saved to `folder`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    ids = _token_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=_padded_vocab(tokenizer), hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = _generation_config(ids)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_trained(model: Any, folder: str | Path, extra: Sequence[Any] = ()) -> None:
    """Save weights (safetensors) and the tokenizer/processor objects beside them."""
    model.save_pretrained(folder, safe_serialization=True)
    for obj in extra:
        obj.save_pretrained(folder)

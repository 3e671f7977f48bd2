"""Build tiny, randomly initialised stand-ins for the project's two models, offline.

The robot code loads a Qwen2.5-VL perception model and a Qwen2-family reasoning model
from folders written by `save_pretrained`. Tests, CI and the demo need the same kind of
folders without a download, so this module writes them from scratch in a few seconds:

* `vlm/`: a Qwen2.5-VL (2 text layers, hidden size 64, vision depth 2) with an
  `AutoProcessor`-loadable processor (Qwen2-VL image and video processors plus a
  byte-level BPE tokenizer trained here on a small built-in corpus). The image budget is
  tiny (at most 16 merged tokens per image), so a 320x240 frame costs few tokens.
* `lm/`: a Qwen2 causal LM of the same size with the same kind of tokenizer.

Both carry a chat template written for this project (ChatML-style turns, image
placeholders for list contents). Outputs are random text: the point is to exercise the
real loading, templating, batching and generation code paths.

A `manifest.json` records the builder version and seed; a later call with the same
folder reuses complete models instead of rebuilding them.

Command line: `embodied-r tiny-models OUT_DIR [--seed N] [--force]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

# Bump whenever the built models change, so stale folders are rebuilt.
BUILDER_VERSION = "1"
MANIFEST_NAME = "manifest.json"

# Special tokens, in the order they receive ids right after the learned vocabulary.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Image budget of the tiny processor (pixels after resizing; one merged token = 28x28).
TINY_MIN_PIXELS = 28 * 28 * 4
TINY_MAX_PIXELS = 28 * 28 * 16

# A ChatML-like template written for this project. String contents are copied; list
# contents may mix {"type": "text"} parts with image/video parts, which become the
# vision placeholder sequence the Qwen2-VL processor expands.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] in ['image', 'image_url'] -%}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] in ['video', 'video_url'] -%}"
    "{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' -%}"
    "{{ part['text'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)

# Training text for the tiny tokenizer: vocabulary of the task, in plain sentences.
_CORPUS_LINES: tuple[str, ...] = (
    "The agent moves forward and sees a red box on the left.",
    "After rotate left, observe: a tall white building ahead-right of the drone.",
    "Move backward, move left, move right, move upward, move downward.",
    "Rotate right, tilt downward, tilt upward, the camera turns.",
    "<think>The chair was left of the table, so the answer is B.</think>",
    "<answer>A</answer> <answer>B</answer> <answer>C</answer> <answer>D</answer>",
    "Question: Which object is closest to the agent?\nChoices:\nA. sofa\nB. lamp",
    "Frame 0: Observe: a green tree below the agent, a road ahead.",
    "Frame 1: After move forward, Observe: a blue car appears on the right.",
    "You are the agent; the video shows your view from the past to the present.",
    "Describe colour, shape and position of each object relative to the agent.",
    "relative distance, relative direction, route planning, appearance order",
    "landmark position, counterfactual, progress evaluation, action generation",
    "0 1 2 3 4 5 6 7 8 9 10 20 32 100 meters left right above below near far",
)


# The tiny vision tower of the test VLM (bench/gpu_latency.py keeps its own copy so it
# runs standalone on a GPU machine without this package installed).
TINY_VISION_CONFIG: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [1],
    "tokens_per_second": 2,
}


@dataclass
class TinyModelPaths:
    """Folders of the two tiny models written by `build_tiny_models`."""

    vlm: Path
    lm: Path


def _manifest(seed: int) -> dict[str, Any]:
    import transformers

    return {
        "builder_version": BUILDER_VERSION,
        "seed": seed,
        "transformers": transformers.__version__,
    }


def _is_complete(folder: Path) -> bool:
    """True when `folder` holds a config, weights and a tokenizer."""
    has_weights = any(folder.glob("*.safetensors")) or (folder / "pytorch_model.bin").exists()
    return (
        (folder / "config.json").is_file()
        and has_weights
        and (folder / "tokenizer.json").is_file()
    )


def _can_reuse(out: Path, seed: int) -> bool:
    manifest = out / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    return (
        recorded == _manifest(seed)
        and _is_complete(out / "vlm")
        and _is_complete(out / "lm")
    )


def build_tokenizer(vocab_size: int = 480, corpus: Sequence[str] | None = None) -> Any:
    """Train a byte-level BPE tokenizer on the built-in corpus (or on `corpus`, the
    mini world's own texts).

    Returns a `PreTrainedTokenizerFast` with the Qwen special tokens, `<|endoftext|>`
    as padding token, `<|im_end|>` as end of turn and the project chat template.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = list(_CORPUS_LINES) * 4 if corpus is None else list(corpus)
    core.train_from_iterator(lines, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS),
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _token_ids(tokenizer: Any) -> dict[str, int]:
    return {tok: int(tokenizer.convert_tokens_to_ids(tok)) for tok in SPECIAL_TOKENS}


def _padded_vocab(tokenizer: Any) -> int:
    """Embedding rows: the tokenizer size rounded up to a multiple of 64."""
    n = len(tokenizer)
    return ((n + 63) // 64) * 64


def _generation_config(ids: dict[str, int]) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=False,
    )


def _build_vlm(folder: Path, tokenizer: Any, seed: int) -> None:
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    ids = _token_ids(tokenizer)
    text_config = {
        "vocab_size": _padded_vocab(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "max_window_layers": 2,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [2, 3, 3],  # sums to head_dim / 2 = 8
        },
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    vision_config = dict(TINY_VISION_CONFIG)
    config = Qwen2_5_VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    model.generation_config = _generation_config(ids)
    model.save_pretrained(folder)

    image_processor = Qwen2VLImageProcessor(
        min_pixels=TINY_MIN_PIXELS, max_pixels=TINY_MAX_PIXELS
    )
    video_processor = Qwen2VLVideoProcessor(
        min_pixels=TINY_MIN_PIXELS, max_pixels=TINY_MAX_PIXELS
    )
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _build_lm(folder: Path, tokenizer: Any, seed: int) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ids = _token_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=_padded_vocab(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,  # untied: random weights then give varied text
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(seed + 1)
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config = _generation_config(ids)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_tiny_models(out_dir: Path | str, *, seed: int = 0, force: bool = False) -> TinyModelPaths:
    """Write (or reuse) the tiny VLM and LM under `out_dir`; return their folders.

    Reuses existing folders when their manifest matches this builder version, seed and
    transformers version and both models are complete; `force=True` always rebuilds.
    Nothing is downloaded.
    """
    out = Path(out_dir).expanduser().resolve()
    paths = TinyModelPaths(vlm=out / "vlm", lm=out / "lm")
    if not force and _can_reuse(out, seed):
        return paths

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    for folder in (paths.vlm, paths.lm):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)

    tokenizer = build_tokenizer()
    _build_vlm(paths.vlm, tokenizer, seed)
    _build_lm(paths.lm, tokenizer, seed)
    # Written last: its presence means both folders are complete.
    (out / MANIFEST_NAME).write_text(json.dumps(_manifest(seed), indent=2) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    """`embodied-r tiny-models OUT_DIR [--seed N] [--force]`."""
    parser = argparse.ArgumentParser(
        prog="embodied-r tiny-models",
        description="Build tiny random Qwen2.5-VL and Qwen2 models into OUT_DIR (no download).",
    )
    parser.add_argument("out_dir", type=Path, help="folder to write vlm/ and lm/ into")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    start = time.monotonic()
    paths = build_tiny_models(args.out_dir, seed=args.seed, force=args.force)
    print(f"vlm: {paths.vlm}")
    print(f"lm:  {paths.lm}")
    print(f"({time.monotonic() - start:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Latency of the two Embodied-R models at full size, on a GPU with no network and no weights.

The script builds the published architectures of Qwen2.5-VL-7B-Instruct (perception)
and Qwen2.5-3B-Instruct (reasoning; the released Embodied-R weights are the Qwen2.5-VL-3B
language decoder, which has the same text architecture) from their config numbers below,
with random bf16 weights created directly on the GPU. No tokenizer or processor is
downloaded: prompts are token ids, images go through a locally constructed Qwen2-VL
image processor. Random weights change nothing in the arithmetic, and output lengths are
pinned (min_new_tokens = max_new_tokens), so timings match real weights of the same shape.

Measured:
* perception, per key frame: one image (frame 0) and an image pair (every later key
  frame) at a fixed image size; prefill (1 new token) and full description time;
* reasoning: prefill time for a ~2k-token prompt and decode speed for 256 new tokens.

    python bench/gpu_latency.py                      # full size, CUDA, bf16
    python bench/gpu_latency.py --json results.json  # also write the numbers
    python bench/gpu_latency.py --tiny               # same code, tiny configs, CPU, seconds

The table is printed last.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

# ---------------------------------------------------------------------------- configs
# Qwen2.5-VL-7B-Instruct, from its published config.json.
QWEN25_VL_7B: dict[str, Any] = {
    "text": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "mrope_section": [16, 24, 24],
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    "vision": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
    },
    "tokens": {
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "first_special_id": 151643,
    },
    "tie_word_embeddings": False,
    "image_processor": {"min_pixels": 3136, "max_pixels": 12845056},
}

# Qwen2.5-3B-Instruct, from its published config.json.
QWEN25_3B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "first_special_id": 151643,
}

# Tiny stand-ins with the same structure, for a CPU smoke run (--tiny).
TINY_VL: dict[str, Any] = {
    "text": {
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "mrope_section": [2, 3, 3],
        "bos_token_id": 500,
        "eos_token_id": 501,
    },
    "vision": {
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
    },
    "tokens": {
        "image_token_id": 505,
        "video_token_id": 506,
        "vision_start_token_id": 503,
        "vision_end_token_id": 504,
        "first_special_id": 500,
    },
    "tie_word_embeddings": False,
    "image_processor": {"min_pixels": 3136, "max_pixels": 28 * 28 * 64},
}

TINY_LM: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 500,
    "eos_token_id": 501,
    "first_special_id": 500,
}


# ---------------------------------------------------------------------------- results
@dataclass
class Row:
    """One measured case; times are medians over the repeats, in seconds."""

    model: str
    case: str
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    total_s: float
    decode_tok_s: float
    repeats: int
    samples_s: list[float] = field(default_factory=list)
    image_tokens: list[int] = field(default_factory=list)  # merged vision tokens per image


@dataclass
class Report:
    settings: dict[str, Any]
    environment: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    memory_gib: dict[str, float] = field(default_factory=dict)
    build_s: dict[str, float] = field(default_factory=dict)


# ------------------------------------------------------------------------------ setup
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny configs on the CPU (smoke test)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    p.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                   help="default: bfloat16 (float32 with --tiny)")
    p.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager, flash_attention_2)")
    p.add_argument("--image-size", default=None, help="WIDTHxHEIGHT of each frame (default 640x480; 112x84 tiny)")
    p.add_argument("--vlm-prompt-tokens", type=int, default=None, help="text tokens around the images (default 200)")
    p.add_argument("--vlm-new-tokens", type=int, default=None, help="description length (default 256)")
    p.add_argument("--lm-prompt-tokens", type=int, default=None, help="reasoning prompt length (default 2048)")
    p.add_argument("--lm-new-tokens", type=int, default=None, help="reasoning output length (default 256)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per case (default 3; 1 tiny)")
    p.add_argument("--skip-vlm", action="store_true", help="measure the reasoning model only")
    p.add_argument("--skip-lm", action="store_true", help="measure the perception model only")
    p.add_argument("--json", dest="json_path", default=None, help="write the results here as JSON")
    args = p.parse_args(argv)
    tiny = args.tiny
    args.device = args.device or ("cpu" if tiny else "cuda")
    args.dtype = args.dtype or ("float32" if tiny else "bfloat16")
    args.image_size = args.image_size or ("112x84" if tiny else "640x480")
    args.vlm_prompt_tokens = args.vlm_prompt_tokens or (24 if tiny else 200)
    args.vlm_new_tokens = args.vlm_new_tokens or (4 if tiny else 256)
    args.lm_prompt_tokens = args.lm_prompt_tokens or (64 if tiny else 2048)
    args.lm_new_tokens = args.lm_new_tokens or (8 if tiny else 256)
    args.repeats = args.repeats or (1 if tiny else 3)
    try:
        w, h = (int(v) for v in args.image_size.lower().split("x"))
    except ValueError:
        p.error(f"--image-size must look like 640x480, got {args.image_size!r}")
    args.width, args.height = w, h
    return args


def environment(torch: Any, device: str) -> dict[str, Any]:
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device,
    }
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def build_vlm(spec: dict[str, Any], torch: Any, device: str, dtype: Any, attn: str) -> Any:
    """Random-weight Qwen2.5-VL built directly on `device`."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = dict(spec["text"])
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": text.pop("rope_theta"),
        "mrope_section": text.pop("mrope_section"),
    }
    tokens = {k: v for k, v in spec["tokens"].items() if k != "first_special_id"}
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=dict(spec["vision"]),
        tie_word_embeddings=spec["tie_word_embeddings"],
        **tokens,
    )
    config._attn_implementation = attn
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype, attn_implementation=attn)
    return model.eval()


def build_lm(spec: dict[str, Any], torch: Any, device: str, dtype: Any, attn: str) -> Any:
    """Random-weight Qwen2 causal LM built directly on `device`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = {k: v for k, v in spec.items() if k not in ("first_special_id", "rope_theta")}
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": spec["rope_theta"]}
    config = Qwen2Config(**cfg)
    torch.manual_seed(1)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype, attn_implementation=attn)
    return model.eval()


def random_text_ids(torch: Any, n: int, limit: int, seed: int) -> Any:
    """`n` ordinary (non-special) token ids, reproducible."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, limit, (n,), generator=gen)


def perception_inputs(
    spec: dict[str, Any], torch: Any, n_images: int, args: argparse.Namespace, device: str, dtype: Any
) -> dict[str, Any]:
    """input_ids / pixel_values / grid for a chat-shaped prompt with `n_images` frames."""
    import numpy as np
    from PIL import Image
    from transformers import Qwen2VLImageProcessor

    tok = spec["tokens"]
    processor = Qwen2VLImageProcessor(**spec["image_processor"])
    rng = np.random.default_rng(n_images)
    images = [
        Image.fromarray(rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8))
        for _ in range(n_images)
    ]
    vision = processor(images=images, return_tensors="pt")
    grid = vision["image_grid_thw"]
    merge = spec["vision"]["spatial_merge_size"] ** 2
    per_image = [int(g.prod()) // merge for g in grid]
    head = random_text_ids(torch, 4, tok["first_special_id"], 11)
    tail = random_text_ids(torch, max(1, args.vlm_prompt_tokens - 4), tok["first_special_id"], 12)
    parts = [head]
    for count in per_image:
        parts.append(torch.tensor([tok["vision_start_token_id"]]))
        parts.append(torch.full((count,), tok["image_token_id"]))
        parts.append(torch.tensor([tok["vision_end_token_id"]]))
    parts.append(tail)
    input_ids = torch.cat(parts).unsqueeze(0)
    mm_types = (input_ids == tok["image_token_id"]).int()
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": torch.ones_like(input_ids).to(device),
        "mm_token_type_ids": mm_types.to(device),
        "pixel_values": vision["pixel_values"].to(device=device, dtype=dtype),
        "image_grid_thw": grid.to(device),
        "_image_tokens": per_image,
    }


def timed_generate(model: Any, inputs: dict[str, Any], new_tokens: int, torch: Any, device: str) -> float:
    """Seconds for one greedy generate() of exactly `new_tokens` tokens."""
    kwargs = {k: v for k, v in inputs.items() if not k.startswith("_")}
    sync(torch, device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            **kwargs,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    sync(torch, device)
    elapsed = time.perf_counter() - start
    produced = out.shape[1] - kwargs["input_ids"].shape[1]
    if produced != new_tokens:
        raise RuntimeError(f"expected {new_tokens} new tokens, got {produced}")
    return elapsed


def measure(
    label: str, case: str, model: Any, inputs: dict[str, Any], new_tokens: int, repeats: int, torch: Any, device: str
) -> Row:
    """Warm up once, then median prefill (1 token) and full-generation times."""
    timed_generate(model, inputs, new_tokens, torch, device)  # warm-up at full length
    prefill = [timed_generate(model, inputs, 1, torch, device) for _ in range(repeats)]
    total = [timed_generate(model, inputs, new_tokens, torch, device) for _ in range(repeats)]
    prefill_s = statistics.median(prefill)
    total_s = statistics.median(total)
    decode_s = total_s - prefill_s
    # Timing noise can make a tiny CPU run's difference meaningless: report NaN then.
    decode_tok_s = (new_tokens - 1) / decode_s if new_tokens > 1 and decode_s > 0 else float("nan")
    return Row(
        model=label,
        case=case,
        prompt_tokens=int(inputs["input_ids"].shape[1]),
        new_tokens=new_tokens,
        prefill_s=prefill_s,
        total_s=total_s,
        decode_tok_s=decode_tok_s,
        repeats=repeats,
        samples_s=total,
        image_tokens=list(inputs.get("_image_tokens", [])),
    )


def release_memory(torch: Any, device: str) -> None:
    """Return freed blocks to the device. The caller drops its own reference to the model
    first: a `del` inside this function would only drop this function's name for it."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def peak_gib(torch: Any, device: str) -> float:
    if not device.startswith("cuda"):
        return 0.0
    return torch.cuda.max_memory_allocated(device) / 2**30


def format_table(report: Report) -> str:
    header = f"{'model':<26} {'case':<22} {'prompt':>6} {'new':>5} {'prefill s':>9} {'total s':>8} {'decode tok/s':>12}"
    lines = [header, "-" * len(header)]
    for r in report.rows:
        lines.append(
            f"{r.model:<26} {r.case:<22} {r.prompt_tokens:>6} {r.new_tokens:>5} "
            f"{r.prefill_s:>9.3f} {r.total_s:>8.3f} {r.decode_tok_s:>12.1f}"
        )
    if report.memory_gib:
        lines.append("peak GPU memory GiB: " + ", ".join(f"{k} {v:.1f}" for k, v in report.memory_gib.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> Report:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or use --tiny for a CPU smoke run")
    dtype = getattr(torch, args.dtype)
    vl_spec, lm_spec = (TINY_VL, TINY_LM) if args.tiny else (QWEN25_VL_7B, QWEN25_3B)
    vl_name = "tiny-qwen2.5-vl" if args.tiny else "Qwen2.5-VL-7B (random)"
    lm_name = "tiny-qwen2.5" if args.tiny else "Qwen2.5-3B (random)"
    settings = {k: v for k, v in vars(args).items() if k != "json_path"}
    report = Report(settings=settings, environment=environment(torch, args.device))

    if not args.skip_vlm:
        start = time.perf_counter()
        vlm = build_vlm(vl_spec, torch, args.device, dtype, args.attn)
        sync(torch, args.device)
        report.build_s["vlm"] = time.perf_counter() - start
        for n_images, case in ((1, "1 image (frame 0)"), (2, "2 images (key frame)")):
            inputs = perception_inputs(vl_spec, torch, n_images, args, args.device, dtype)
            case = f"{case[:-1]}, {args.width}x{args.height})" if not args.tiny else case
            row = measure(vl_name, case, vlm, inputs, args.vlm_new_tokens, args.repeats, torch, args.device)
            report.rows.append(row)
            print(f"[{row.model}] {row.case}: {row.total_s:.3f} s", file=sys.stderr, flush=True)
        report.memory_gib["vlm"] = peak_gib(torch, args.device)
        del vlm
        release_memory(torch, args.device)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(args.device)

    if not args.skip_lm:
        start = time.perf_counter()
        lm = build_lm(lm_spec, torch, args.device, dtype, args.attn)
        sync(torch, args.device)
        report.build_s["lm"] = time.perf_counter() - start
        ids = random_text_ids(torch, args.lm_prompt_tokens, lm_spec["first_special_id"], 21).unsqueeze(0)
        inputs = {"input_ids": ids.to(args.device), "attention_mask": torch.ones_like(ids).to(args.device)}
        row = measure(lm_name, "reasoning", lm, inputs, args.lm_new_tokens, args.repeats, torch, args.device)
        report.rows.append(row)
        print(f"[{row.model}] {row.case}: {row.total_s:.3f} s", file=sys.stderr, flush=True)
        report.memory_gib["lm"] = peak_gib(torch, args.device)
        del lm
        release_memory(torch, args.device)
    return report


def _json_safe(value: Any) -> Any:
    """NaN/inf -> None so the file is strict JSON."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(_json_safe(asdict(report)), fh, indent=2, allow_nan=False)
            fh.write("\n")
    print(format_table(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The policy of the reference scripts: the language model of a Qwen2.5-VL checkpoint.

The paper trains Qwen2.5-3B-Instruct; the reference scripts train the text decoder of
Qwen2.5-VL-3B-Instruct instead, feeding it text only (the video arrives as the VLM's
descriptions). `extract_language_model` writes that decoder as an ordinary Qwen2
causal-LM checkpoint (`Qwen2ForCausalLM`: embeddings, decoder layers, final norm and
LM head copied unchanged; the vision tower left out) with the VLM's tokenizer, chat
template and generation settings. TRL, vLLM, DeepSpeed and the core's reasoning backends
then treat it like any 3B LM, and no vision weights sit in GPU memory during training.

Why this is the same model on text: Qwen2.5-VL's decoder is Qwen2's architecture with
multimodal rotary positions (separate temporal / height / width position ids for three
slices of each head). For text tokens all three ids equal the token's position, so every
slice rotates by the same angle as ordinary rotary embedding with the same base: the two
models compute the same logits. The test checks this on a tiny Qwen2.5-VL.

    embodied-r-train extract-lm Qwen/Qwen2.5-VL-3B-Instruct outputs/policy_init/vl3b_lm
    (or set model.language_model_of_vlm: true in a grpo config, see paper_8gpu_vl3b.yaml)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from embodied_r_ros.core.errors import ModelUnavailableError

MANIFEST = "extracted_from.json"
VL_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")


def is_vl_checkpoint(path: str | Path) -> bool:
    """True when the checkpoint's config says it is a Qwen2-VL / Qwen2.5-VL model."""
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(str(path)), "model_type", "") in VL_MODEL_TYPES


def is_extracted(folder: str | Path) -> bool:
    """True when `folder` holds a finished extraction (the manifest is written last)."""
    folder = Path(folder)
    return (folder / MANIFEST).is_file() and (folder / "config.json").is_file()


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def language_model_config(vl_config: Any) -> Any:
    """The `Qwen2Config` of a Qwen2.5-VL config's text decoder (rotary positions 1-D)."""
    from transformers import Qwen2Config

    text = _text_config(vl_config)
    rope = dict(getattr(text, "rope_parameters", None) or {})
    theta = rope.get("rope_theta", getattr(text, "rope_theta", 1000000.0))
    tie = getattr(vl_config, "tie_word_embeddings", None)
    if tie is None:
        tie = getattr(text, "tie_word_embeddings", False)
    return Qwen2Config(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=text.num_hidden_layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads,
        hidden_act=text.hidden_act,
        max_position_embeddings=text.max_position_embeddings,
        rms_norm_eps=text.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        attention_dropout=getattr(text, "attention_dropout", 0.0),
        use_sliding_window=getattr(text, "use_sliding_window", False),
        sliding_window=getattr(text, "sliding_window", None),
        max_window_layers=getattr(text, "max_window_layers", text.num_hidden_layers),
        tie_word_embeddings=bool(tie),
        bos_token_id=getattr(text, "bos_token_id", None),
        eos_token_id=getattr(text, "eos_token_id", None),
        pad_token_id=getattr(text, "pad_token_id", None),
    )


def extract_language_model(src: str | Path, dst: str | Path, *, dtype: str | None = None,
                           force: bool = False) -> Path:
    """Write the text decoder of the Qwen2.5-VL checkpoint `src` as a Qwen2ForCausalLM
    checkpoint in `dst` (reused when already complete, unless `force`); returns `dst`."""
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForImageTextToText,
        AutoTokenizer,
        GenerationConfig,
        Qwen2ForCausalLM,
    )

    dst = Path(dst)
    if is_extracted(dst) and not force:
        return dst
    try:
        vl_config = AutoConfig.from_pretrained(str(src))
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(
            f"cannot read the config of {src} ({exc}); give a local Qwen2.5-VL folder or a model id "
            "available in the Hugging Face cache"
        ) from exc
    if getattr(vl_config, "model_type", "") not in VL_MODEL_TYPES:
        raise ModelUnavailableError(
            f"{src} is a {getattr(vl_config, 'model_type', '?')!r} model, not Qwen2-VL/Qwen2.5-VL; "
            "set model.language_model_of_vlm: false to train it as it is"
        )
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    vl = AutoModelForImageTextToText.from_pretrained(str(src), dtype=torch_dtype or "auto")
    config = language_model_config(vl_config)
    state: dict[str, Any] = {}
    for key, value in vl.state_dict().items():
        if key.startswith("model.language_model."):
            state["model." + key[len("model.language_model."):]] = value
        elif key == "lm_head.weight":
            state[key] = value
    with torch.device("meta"):
        lm = Qwen2ForCausalLM(config)
    expected = set(lm.state_dict())
    missing = expected - set(state)
    if config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    if missing or set(state) - expected - {"lm_head.weight"}:
        raise ModelUnavailableError(
            f"{src}: its language model does not map onto Qwen2 (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(set(state) - expected)[:5]})"
        )
    lm.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        lm.tie_weights()
    lm.to(dtype=next(iter(state.values())).dtype)
    try:
        lm.generation_config = GenerationConfig.from_pretrained(str(src))
    except OSError:
        pass
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    lm.save_pretrained(str(dst))
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    if not getattr(tokenizer, "chat_template", None):
        from transformers import AutoProcessor

        tokenizer.chat_template = getattr(AutoProcessor.from_pretrained(str(src)), "chat_template", None)
    tokenizer.save_pretrained(str(dst))
    (dst / MANIFEST).write_text(json.dumps({"source": str(src), "architecture": "Qwen2ForCausalLM",
                                            "part": "language model of a Qwen2.5-VL checkpoint"}, indent=2) + "\n")
    return dst


def resolve_policy(model_cfg: dict[str, Any], output_dir: str | Path) -> str:
    """The checkpoint to train: `model.name_or_path`, or (with `language_model_of_vlm`)
    its extracted language model, written once by the main process while the others
    wait."""
    path = model_cfg.get("name_or_path")
    if not path:
        raise ModelUnavailableError("model.name_or_path is required (a model id or a local folder)")
    if not model_cfg.get("language_model_of_vlm"):
        return str(path)
    dst = Path(model_cfg.get("extracted_dir") or Path(output_dir) / "policy_init")
    from accelerate import PartialState

    with PartialState().main_process_first():
        if not is_extracted(dst):
            extract_language_model(path, dst, dtype=model_cfg.get("dtype"))
    return str(dst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="embodied-r-train extract-lm",
        description="Write the language model of a Qwen2.5-VL checkpoint as a Qwen2 causal-LM checkpoint.",
    )
    parser.add_argument("src", help="Qwen2.5-VL checkpoint (local folder or cached model id)")
    parser.add_argument("dst", help="output folder")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: the checkpoint's)")
    parser.add_argument("--force", action="store_true", help="rewrite even if dst is complete")
    args = parser.parse_args(argv)
    out = extract_language_model(args.src, args.dst, dtype=args.dtype, force=args.force)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The whole method trained and measured on the mini world, on a CPU.

* `models`: a tokenizer trained on the world's own texts and the two tiny models of the
  real architectures (Qwen2.5-VL for perception, Qwen2 for reasoning), written with
  `save_pretrained` so the robot's loading code reads them as it reads real weights.
* `vlm_sft`: supervised captions for the perception model, written from the renderer's
  per-pixel labels (`embodied_r_ros.sample_data.captions`), for both streaming prompts.
* `lm_sft`: the reasoning model's warm-up on worked examples (think/answer format) and
  on the consistency judge's prompt.
* `judge`: the consistency reward's judge, trained from the warm-up model to write its
  own option scan from the reasoning's decision instead of copying the answer's letter.
* `run`: one command for everything (world, both models, perception cache, GRPO with
  and without the consistency reward, the results table, shipped checkpoints).

    embodied-r-train mini-world --out artifacts/mini_world
"""

"""Offline training package of Embodied-R (installed as `embodied_r_training`).

Pieces, one module each:

* `data`: read VSI-Bench / UrbanVideo-Bench as published (or records in the datasets'
  record format), keep the paper's eight question categories, find every question's
  video, split by scene (UrbanVideo-Bench: by flight).
* `videos`: video roots (an unpacked tree or VSI-Bench's zip archives, read in place).
* `perception_cache`: key frames + VLM descriptions per video, computed once, resumable.
* `reward_funcs`: the TRL reward functions (format, accuracy, consistency) built from the
  rewards (training/rewards.py), with the project's or the reference code's rules.
* `schedule`: reward weights (the paper's stages by epoch), applied to a running trainer.
* `grpo`: GRPO training with TRL's `GRPOTrainer` from one YAML file, validated on the
  val split.
* `policy`: the language model of a Qwen2.5-VL checkpoint as a plain causal LM.
* `evaluate`: the paper's table and VSI-Bench's own scores, consistency rate, length.
* `plots`: training and validation curves from `trainer_state.json`.
* `toy`: a small benchmark laid out exactly like the two downloads (tests, dry run).
* `errors`: the typed errors of the package.

Everything prompt-, parsing- or reward-related is imported from `embodied_r_ros.core`, so
the robot and the trainer share one copy of each.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"

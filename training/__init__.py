"""Offline training package of Embodied-R (installed as `embodied_r_training`).

Pieces, one module each:

* `data`: read VSI-Bench / UrbanVideo-Bench parquet files (or records already in the
  project's JSON format), keep the paper's eight question categories and split by scene.
* `perception_cache`: key frames + VLM descriptions per video, computed once, resumable.
* `reward_funcs`: the TRL reward functions (format, accuracy, consistency) built from the
  core rewards, plus their weights.
* `schedule`: the paper's reward-weight stages by epoch, applied to a running trainer.
* `grpo`: GRPO training with TRL's `GRPOTrainer` from one YAML file.
* `evaluate`: accuracy per category, consistency rate and completion length of any model.
* `plots`: training curves from `trainer_state.json`.

Everything prompt-, parsing- or reward-related is imported from `embodied_r_ros.core`, so
the robot and the trainer share one copy of each.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"

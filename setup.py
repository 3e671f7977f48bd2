"""pip-installable ROS-free parts of embodied_r_ros: the core and the training package.

`pip install .` gives the light core (key frames, prompts, parsing, rewards, memory);
extras add the model backends and training. The ROS nodes and interfaces are built by
colcon from CMakeLists.txt / package.xml instead (see README).
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def requirements(name: str) -> list[str]:
    """The requirement lines of requirements/<name>.txt (the one list of that group)."""
    lines = (HERE / "requirements" / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


MODELS = requirements("models")
TRAIN = MODELS + requirements("train")
EXTRAS = {
    "models": MODELS,
    "serve": MODELS + requirements("serve"),
    "train": TRAIN,
    "vllm": MODELS + requirements("vllm"),
    "deepspeed": TRAIN + requirements("deepspeed"),
    "bags": requirements("bags"),
    "test": requirements("test") + requirements("bags"),
}

setup(
    name="embodied_r_ros",
    version="0.1.0",
    description="Embodied-R spatial reasoning core and GRPO training (ROS-free parts).",
    python_requires=">=3.10",
    # embodied_r_ros.nodes needs rclpy at run time (ROS machines only)
    packages=[*find_packages(include=["embodied_r_ros", "embodied_r_ros.*"]),
              "embodied_r_training", "embodied_r_training.mini_world"],
    package_dir={"embodied_r_training": "training"},
    package_data={"embodied_r_training": ["configs/*.yaml", "configs/*.json"],
                  # the mini world's trained checkpoints (docs/mini_world.md)
                  "embodied_r_ros": ["sample_data/models/*.json", "sample_data/models/*/*"]},
    install_requires=requirements("core"),
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "embodied-r=embodied_r_ros.cli:main",
            "embodied-r-train=embodied_r_training.cli:main",
        ]
    },
)

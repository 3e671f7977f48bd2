"""pip-installable ROS-free parts of embodied_r_ros: the core and the training package.

`pip install .` gives the light core (key frames, prompts, parsing, rewards, memory);
extras add the model backends and training. The ROS nodes and interfaces are built by
colcon from CMakeLists.txt / package.xml instead (see README).
"""

from setuptools import setup

MODELS = [
    "torch>=2.4",
    "transformers>=5.0,<6",
    "tokenizers",
    "accelerate",
    "pillow",
]
TRAIN = MODELS + [
    "trl>=1.0", "datasets", "pyarrow", "pandas", "peft", "matplotlib", "tensorboard",
]

setup(
    name="embodied_r_ros",
    version="0.1.0",
    description="Embodied-R spatial reasoning core and GRPO training (ROS-free parts).",
    python_requires=">=3.10",
    packages=[
        "embodied_r_ros",
        "embodied_r_ros.core",
        "embodied_r_ros.core.backends",
        "embodied_r_ros.sample_data",
        "embodied_r_ros.nodes",  # needs rclpy at run time (ROS machines only)
        "embodied_r_training",
    ],
    package_dir={"embodied_r_training": "training"},
    package_data={"embodied_r_training": ["configs/*.yaml", "configs/*.json"]},
    install_requires=[
        "numpy>=1.24",
        "opencv-python-headless>=4.8",
        "av>=14",
        "pyyaml>=6",
        "tqdm>=4.60",
        "httpx>=0.27",
    ],
    extras_require={
        "models": MODELS,
        "serve": MODELS + ["transformers[serving]"],
        "train": TRAIN,
        "vllm": MODELS + ["vllm"],
        "deepspeed": TRAIN + ["deepspeed"],
        "bags": ["rosbags>=0.10"],
        "test": ["pytest", "pytest-timeout", "hypothesis", "rosbags>=0.10"],
    },
    entry_points={
        "console_scripts": [
            "embodied-r=embodied_r_ros.cli:main",
            "embodied-r-train=embodied_r_training.cli:main",
        ]
    },
)

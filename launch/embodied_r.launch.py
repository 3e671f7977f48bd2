"""Start the embodied_r_ros graph on a robot with a normal ROS 2 install.

    ros2 launch embodied_r_ros embodied_r.launch.py \
        perception_model:=/models/Qwen2.5-VL-7B-Instruct \
        reasoning_model:=/models/Embodied-R camera_topic:=/camera/color/image_raw

Arguments:
  graph             embedded (default: one process, models loaded once) or split
                    (keyframe_node, perception_node and reasoning_node as three processes)
  params_file       parameter file (default: this package's config/embodied_r.yaml);
                    the same file the in-process runner reads
  perception_model  overrides perception.model when non-empty
  reasoning_model   overrides reasoning.model when non-empty
  camera_topic      overrides camera.topic when non-empty
  namespace         ROS namespace for every node (default: none)
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "embodied_r_ros"


def _overrides(context) -> dict[str, str]:  # type: ignore[no-untyped-def]
    mapping = {"perception_model": "perception.model", "reasoning_model": "reasoning.model",
               "camera_topic": "camera.topic"}
    out = {}
    for arg, param in mapping.items():
        value = LaunchConfiguration(arg).perform(context)
        if value:
            out[param] = value
    return out


def _nodes(context, *args, **kwargs):  # type: ignore[no-untyped-def]
    params_file = LaunchConfiguration("params_file").perform(context)
    namespace = LaunchConfiguration("namespace").perform(context)
    graph = LaunchConfiguration("graph").perform(context)
    parameters = [params_file, _overrides(context)]
    if graph == "embedded":
        specs = [("embodied_r_node", "embodied_r")]
    elif graph == "split":
        specs = [("keyframe_node", "keyframe_selector"), ("perception_node", "perception"),
                 ("reasoning_node", "reasoning")]
    else:
        raise RuntimeError(f"graph must be 'embedded' or 'split', not {graph!r}")
    return [Node(package=PACKAGE, executable=exe, name=name, namespace=namespace,
                 parameters=parameters, output="screen", emulate_tty=True)
            for exe, name in specs]


def generate_launch_description() -> LaunchDescription:
    default_params = os.path.join(get_package_share_directory(PACKAGE), "config",
                                  "embodied_r.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("graph", default_value="embedded",
                              description="embedded (one process) or split (three processes)"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="ROS 2 parameter file for every node"),
        DeclareLaunchArgument("perception_model", default_value="",
                              description="VLM id or path (overrides perception.model)"),
        DeclareLaunchArgument("reasoning_model", default_value="",
                              description="reasoning LM id or path (overrides reasoning.model)"),
        DeclareLaunchArgument("camera_topic", default_value="",
                              description="camera topic (overrides camera.topic)"),
        DeclareLaunchArgument("namespace", default_value="", description="ROS namespace"),
        OpaqueFunction(function=_nodes),
    ])

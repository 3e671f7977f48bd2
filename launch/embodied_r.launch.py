"""Start the embodied_r_ros graph on a robot with a normal ROS 2 install.

    ros2 launch embodied_r_ros embodied_r.launch.py models:=onboard_small_vlm \
        camera_topic:=/camera/color/image_raw
    ros2 launch embodied_r_ros embodied_r.launch.py graph:=split namespace:=robot1 \
        perception_model:=/models/Qwen2.5-VL-7B-Instruct reasoning_model:=/models/Embodied-R

The graph (executables, node names, parameter files, overrides, remappings) is defined
once in `embodied_r_ros.graph`; this file only turns it into launch_ros actions. Where
`ros2 launch` is not installed, `embodied-r launch name:=value ...` starts the same
installed executables with the same arguments. Run `ros2 launch embodied_r_ros
embodied_r.launch.py --show-args` for every argument with its description.
"""

from __future__ import annotations

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from embodied_r_ros.graph import (
    LAUNCH_ARGUMENTS,
    PACKAGE,
    graph_launch,
    parameter_files,
    share_dir,
)
from launch import LaunchDescription


def _nodes(context, *args, **kwargs):  # type: ignore[no-untyped-def]
    values = {a.name: LaunchConfiguration(a.name).perform(context) for a in LAUNCH_ARGUMENTS}
    launches = graph_launch(values.pop("graph"), share=share_dir(), **values)
    # Parameter files only, the launch's explicit values in the last one, so an explicit
    # argument (reasoning_model:=...) wins over the models setup, as under `embodied-r
    # launch` (a dict here would be written by launch_ros as flat names, which lose to two
    # earlier files that set the same name).
    return [LifecycleNode(package=PACKAGE, executable=launch.spec.executable, name=launch.name,
                          namespace=launch.namespace,
                          parameters=parameter_files(launch),
                          remappings=list(launch.remappings), output="screen",
                          emulate_tty=True)
            for launch in launches]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *[DeclareLaunchArgument(a.name, default_value=a.default, description=a.description)
          for a in LAUNCH_ARGUMENTS],
        OpaqueFunction(function=_nodes),
    ])

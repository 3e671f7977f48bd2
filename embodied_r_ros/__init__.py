"""embodied_r_ros: embodied spatial reasoning for ROS 2 robots (the Embodied-R method).

`embodied_r_ros.core` is ROS-free and importable with only numpy/opencv installed.
The ROS nodes live in `embodied_r_ros.nodes`. The generated interfaces
(`embodied_r_ros.msg`, `.srv`, `.action`) come from the colcon install space; the
package path is extended so that a source checkout and the install space combine.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"

"""Replay evaluation of the robot pipeline (ROS-free except the live mode).

* `questions` - question files, and which bag each question belongs to;
* `fast` - the core pipeline fed a bag in this process (no DDS);
* `live` - the node graph over DDS, fed by a replay client (timing as on the robot);
* `results` - per-question results (append-only, resumable) and the JSON / markdown /
  PNG summary;
* `run` - the `embodied-r replay-eval` command; `video2bag` turns benchmark videos into
  bags for it.

The demo (`embodied_r_ros.demo`) runs one live replay of the bundled sample through the
same `live.LiveReplay`.
"""

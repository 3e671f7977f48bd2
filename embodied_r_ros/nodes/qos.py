"""QoS of the graph's own topics.

Descriptions are reliable and transient-local: a node that joins late (or whose
discovery finishes after the first messages, which happens at start-up) still receives
the recent history, so no description is missing from the reasoning prompt. Volatile
subscribers (e.g. `ros2 topic echo`) stay compatible; they just get no history.

Key frames carry images and stay volatile: with transient-local durability, publishing
them slowed the camera path enough that the embedded node dropped most camera frames in
the tests (measured: 45 of 321 frames received at 8x replay, versus all of them).
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# Key frames carry images: reliable, no history for late joiners (see above).
KEYFRAME_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=32,
                          reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.VOLATILE)
# Descriptions are short text: keep enough for a long episode's prompt.
DESCRIPTION_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=256,
                             reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Answers and prompts: reliable, for loggers that are already listening.
EVENT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50,
                       reliability=ReliabilityPolicy.RELIABLE)

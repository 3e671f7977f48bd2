"""QoS of the graph's own topics.

Descriptions are reliable and transient-local: a node that joins late (or whose
discovery finishes after the first messages, which happens at start-up) still receives
the recent history, so no description is missing from the reasoning prompt. Volatile
subscribers (e.g. `ros2 topic echo`) stay compatible; they just get no history.

Key frames carry images and stay volatile: a history of them would be replayed to every
late subscriber (dashboards included) at a real cost in bandwidth, and only the
perception node needs them live. In tests, a transient-local key-frame topic coincided
with the embedded node dropping most camera frames at 8x replay; that was not
investigated further.
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

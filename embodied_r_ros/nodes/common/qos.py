"""QoS of the graph's own topics.

Key frames and descriptions are reliable and transient-local: a node that joins late, or
whose discovery finishes after the first messages (which happens at start-up: the first
key frame was lost to the perception node in several test runs with volatile
key frames), still receives the recent history, so no key frame goes undescribed and no
description is missing from the reasoning prompt. Receivers store descriptions by
key-frame index, so a history delivered twice changes nothing. Volatile subscribers
(e.g. `ros2 topic echo`) stay compatible; they just get no history.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# Key frames carry images: a modest history.
KEYFRAME_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=32,
                          reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Descriptions are short text: keep enough for a long episode's prompt.
DESCRIPTION_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=256,
                             reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Episode announcements: the latest one is kept for late joiners.
EPISODE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Plain images of the key frames, for viewers (rqt_image_view): sensor-data style.
KEYFRAME_IMAGE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                                reliability=ReliabilityPolicy.BEST_EFFORT,
                                durability=DurabilityPolicy.VOLATILE)
# Answers and prompts: reliable, for loggers that are already listening.
EVENT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50,
                       reliability=ReliabilityPolicy.RELIABLE)

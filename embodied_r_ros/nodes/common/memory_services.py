"""ROS side of the key-frame store (core/memory/): the Recall service and the store's
diagnostics entry. Used by the nodes that own a store (embedded, reasoning)."""

from __future__ import annotations

import time
from typing import Any

from sensor_msgs.msg import CompressedImage
from std_msgs.msg import Header

from embodied_r_ros.core.health import OK, WARN, HealthItem
from embodied_r_ros.core.memory.evidence import EvidenceItem
from embodied_r_ros.core.memory.long_term import LongTermMemory
from embodied_r_ros.nodes.common.conversions import evidence_to_msg, seconds_to_stamp
from embodied_r_ros.srv import Recall

DEFAULT_K = 5
MAX_K = 200


class MemoryServices:
    """Serves `Recall` from a node's `LongTermMemory`; reports the store's health."""

    def __init__(self, node: Any, memory: LongTermMemory) -> None:
        self.node = node
        self.memory = memory

    def serve(self, service_name: str, callback_group: Any = None) -> None:
        self.node.create_tracked_service(Recall, service_name, "recall service", self._on_recall,
                                         callback_group=callback_group)

    def _on_recall(self, request: Recall.Request, response: Recall.Response) -> Recall.Response:
        start = time.monotonic()
        store = self.memory.store
        k = min(MAX_K, int(request.k) or DEFAULT_K)
        try:
            hits = store.search(request.query, k, episode_id=request.episode_id or None)
        except Exception as exc:  # noqa: BLE001 - a typed failure, never a dead service
            response.success, response.message = False, f"recall failed: {exc}"
            return response
        for rank, (episode, index, score) in enumerate(hits):
            records = store.get(episode, [index])
            if not records:
                continue
            r = records[0]
            response.results.append(evidence_to_msg(EvidenceItem(
                episode, index, r.stamp_s, rank, False, r.observation, r.pose, score)))
            if request.thumbnails:
                image = CompressedImage(header=Header(stamp=seconds_to_stamp(r.stamp_s)),
                                        format="jpeg")
                image.data = bytes(r.thumbnail or b"")
                response.thumbnail_images.append(image)
        response.success = True
        elapsed_ms = (time.monotonic() - start) * 1000
        response.message = (f"{len(response.results)} key frame(s) match "
                            f"({elapsed_ms:.1f} ms)" if response.results else
                            "no stored key frame matches the query's words")
        return response

    def health(self, node_name: str) -> HealthItem:
        level, message = self.memory.health()
        store = self.memory.store
        item = HealthItem(f"{node_name}: memory", OK if level == "ok" else WARN, message)
        item.values = {"path": self.memory.path, "written": str(store.written),
                       "pending": str(store.pending()), "disk full": str(store.disk_full),
                       "removed by retention": str(store.removed_by_retention),
                       "moved aside": store.recovered_from or "-"}
        return item

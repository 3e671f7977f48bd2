"""Publishing a node's health on /diagnostics (diagnostic_msgs/DiagnosticArray), the
topic the standard `diagnostic_aggregator` and `rqt_robot_monitor` read. Published in
every lifecycle state (a node that failed to configure says why). What each entry holds
and when it is WARN or ERROR: `embodied_r_ros.core.health`."""

from __future__ import annotations

from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from embodied_r_ros.core.health import HealthItem

TOPIC = "/diagnostics"


def to_status(item: HealthItem, hardware_id: str) -> DiagnosticStatus:
    return DiagnosticStatus(level=bytes([item.level]), name=item.name, message=item.message,
                            hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=v) for k, v in item.values.items()])


class DiagnosticsPublisher:
    def __init__(self, node: Node, period_s: float, collect: Callable[[], list[HealthItem]],
                 on_error: Callable[[str, BaseException], None]) -> None:
        self.node = node
        self.collect = collect
        self.on_error = on_error
        self.publisher = node.create_publisher(DiagnosticArray, TOPIC, 10)
        self.timer = (node.create_timer(period_s, self.publish,
                                        callback_group=MutuallyExclusiveCallbackGroup())
                      if period_s > 0 else None)

    def publish(self) -> None:
        try:
            items = self.collect()
            msg = DiagnosticArray()
            msg.header.stamp = self.node.get_clock().now().to_msg()
            hardware_id = self.node.get_fully_qualified_name()
            msg.status = [to_status(item, hardware_id) for item in items]
            self.publisher.publish(msg)
        except Exception as exc:  # noqa: BLE001 - diagnostics must never end the node
            self.on_error("diagnostics", exc)

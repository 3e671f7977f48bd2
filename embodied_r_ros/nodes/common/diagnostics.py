"""Publishing a node's health on /diagnostics (diagnostic_msgs/DiagnosticArray), the
topic the standard `diagnostic_aggregator` and `rqt_robot_monitor` read. Published in
every lifecycle state (a node that failed to configure says why). What each entry holds
and when it is WARN or ERROR: `embodied_r_ros.core.health`.

The timer runs on the steady clock, so /diagnostics keeps its rate with use_sim_time
true; when simulated time does not advance (no /clock publisher, a paused bag) an extra
WARN entry and a log line say so, since every stream-time rate then stands still. The
period is applied again at each configure (`diagnostics.period_s` may change while the
node is unconfigured)."""

from __future__ import annotations

import time
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.timer import Timer

from embodied_r_ros.core.health import WARN, HealthItem

# Simulated time standing still this long (steady seconds) counts as "not advancing".
SIM_CLOCK_STALL_S = 3.0

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
        self.period_s = -1.0
        self.timer: Timer | None = None
        self._group = MutuallyExclusiveCallbackGroup()
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._sim_last = (-1, 0.0)  # (ROS time ns, steady time when it last changed)
        self._sim_warned = False
        self.set_period(period_s)

    def set_period(self, period_s: float) -> None:
        """(Re)start the timer with a new period (0 = no diagnostics)."""
        if period_s == self.period_s:
            return
        if self.timer is not None:
            self.node.destroy_timer(self.timer)
            self.timer = None
        self.period_s = period_s
        if period_s > 0:
            self.timer = self.node.create_timer(period_s, self.publish,
                                                callback_group=self._group, clock=self._steady)

    def _sim_clock_item(self) -> HealthItem | None:
        """A WARN entry while use_sim_time is on and simulated time stands still."""
        node = self.node
        if not node.has_parameter("use_sim_time") or not node.get_parameter("use_sim_time").value:
            return None
        now_ns = node.get_clock().now().nanoseconds
        steady = time.monotonic()
        if now_ns != self._sim_last[0]:
            self._sim_last = (now_ns, steady)
            self._sim_warned = False
            return None
        stalled = steady - self._sim_last[1]
        if stalled < SIM_CLOCK_STALL_S:
            return None
        message = (f"use_sim_time is true but the clock is not advancing (ROS time stuck at "
                   f"{now_ns / 1e9:.1f}s for {stalled:.0f}s): publish /clock (e.g. play the "
                   "bag with --clock) or set use_sim_time false")
        if not self._sim_warned:
            self._sim_warned = True
            node.get_logger().warning(message)
        return HealthItem(name=f"{node.get_fully_qualified_name()}: clock", level=WARN,
                          message=message, values={"ros_time_s": f"{now_ns / 1e9:.3f}"})

    def publish(self) -> None:
        try:
            items = self.collect()
            sim = self._sim_clock_item()
            if sim is not None:
                items = [*items, sim]
            msg = DiagnosticArray()
            msg.header.stamp = self.node.get_clock().now().to_msg()
            hardware_id = self.node.get_fully_qualified_name()
            msg.status = [to_status(item, hardware_id) for item in items]
            self.publisher.publish(msg)
        except Exception as exc:  # noqa: BLE001 - diagnostics must never end the node
            self.on_error("diagnostics", exc)

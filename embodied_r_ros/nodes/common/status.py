"""The `status` service (embodied_r_ros/GetStatus), served in every lifecycle state so an
operator can always see why a node is not answering (e.g. the configure error)."""

from __future__ import annotations

from collections.abc import Callable

from rclpy.callback_groups import ReentrantCallbackGroup

from embodied_r_ros.msg import NodeStatus
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.srv import GetStatus


class StatusService:
    def __init__(self, node: ManagedNode, graph: str, fill: Callable[[NodeStatus], None],
                 name: str) -> None:
        self.node = node
        self.graph = graph
        self.fill = fill
        self.service = node.create_service(
            GetStatus, name, node.guard.wrap("status service", self._on_status,
                                             self._on_status_error),
            callback_group=ReentrantCallbackGroup())

    def build(self) -> NodeStatus:
        node = self.node
        status = NodeStatus()
        status.header.stamp = node.get_clock().now().to_msg()
        status.node = node.get_fully_qualified_name()
        status.lifecycle_state = node.state
        status.graph = self.graph
        status.last_error = node.last_error or node.guard.last_error
        self.fill(status)
        return status

    def _on_status(self, _request: GetStatus.Request,
                   response: GetStatus.Response) -> GetStatus.Response:
        response.status = self.build()
        return response

    def _on_status_error(self, _request: GetStatus.Request,
                         response: GetStatus.Response) -> GetStatus.Response:
        response.status = NodeStatus(node=self.node.get_fully_qualified_name(),
                                     last_error=self.node.guard.last_error)
        return response

"""Declaring the parameter table of `core.config` on an rclpy node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node

from embodied_r_ros.core import config as cfg


def declare_parameters(node: Node, prefixes: Iterable[str]) -> dict[str, Any]:
    """Declare every parameter under the given prefixes (e.g. "camera", "keyframes") with
    its description, default and range, then return the validated values.

    Raises core.errors.ConfigError for bad values (the caller logs it and exits).
    """
    prefixes = tuple(p + "." for p in prefixes)
    values: dict[str, Any] = {}
    for spec in cfg.PARAMETERS:
        if not spec.name.startswith(prefixes):
            continue
        descriptor = ParameterDescriptor(name=spec.name, description=spec.description,
                                         read_only=True)
        if spec.choices:
            descriptor.additional_constraints = "one of: " + ", ".join(spec.choices)
        if spec.minimum is not None and spec.kind is float:
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(spec.minimum), to_value=1e300, step=0.0)]
        elif spec.minimum is not None and spec.kind is int:
            descriptor.integer_range = [
                IntegerRange(from_value=int(spec.minimum), to_value=2**62, step=0)]
        values[spec.name] = node.declare_parameter(spec.name, spec.default, descriptor).value
    full = cfg.defaults()
    full.update(cfg.validate(values, source=f"node {node.get_name()}"))
    return full

"""Declaring and reading the parameter table of `core.parameters` on an rclpy node.

Parameters are declared with their description, default and range, so `ros2 param
describe` documents them. They may be changed with `ros2 param set` only while the node
is unconfigured (they take effect at the next configure); a change in another state, or
a value of the wrong type or out of range, is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from embodied_r_ros.core import parameters as cfg
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.settings import Settings, build_settings


def _selected(prefixes: Iterable[str]) -> list[cfg.ParamSpec]:
    groups = tuple(prefixes)
    return [spec for spec in cfg.PARAMETERS
            if spec.name.split(".")[0] in groups or spec.name in groups]


def declare_parameters(node: Node, prefixes: Iterable[str]) -> list[str]:
    """Declare every parameter of the given groups ("camera", "keyframes", ... or a top
    level name such as "autostart"); returns the names declared."""
    names = []
    for spec in _selected(prefixes):
        descriptor = ParameterDescriptor(name=spec.name, description=spec.description)
        if spec.choices:
            descriptor.additional_constraints = "one of: " + ", ".join(spec.choices)
        if spec.minimum is not None and spec.kind is float:
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(spec.minimum), to_value=1e300, step=0.0)]
        elif spec.minimum is not None and spec.kind is int:
            descriptor.integer_range = [
                IntegerRange(from_value=int(spec.minimum), to_value=2**62, step=0)]
        node.declare_parameter(spec.name, spec.default, descriptor)
        names.append(spec.name)
    return names


def read_settings(node: Node, names: Iterable[str]) -> Settings:
    """The typed settings from the current values of the declared parameters (every
    other table entry at its default). Raises ConfigError naming the bad parameter."""
    values = {name: node.get_parameter(name).value for name in names}
    return build_settings(values, source=f"node {node.get_fully_qualified_name()}")


def parameter_guard(node: Node, names: Iterable[str],
                    may_change: Callable[[], str]) -> Callable[[list[Parameter]], SetParametersResult]:
    """An on-set-parameters callback: `may_change()` returns "" when changes are allowed
    now, else the reason; values are checked against the table."""
    declared = set(names)

    def check(parameters: list[Parameter]) -> SetParametersResult:
        ours = [p for p in parameters if p.name in declared]
        if not ours:
            return SetParametersResult(successful=True)
        reason = may_change()
        if reason:
            return SetParametersResult(successful=False, reason=reason)
        try:
            current = {name: node.get_parameter(name).value for name in declared}
            current.update({p.name: p.value for p in ours})
            cfg.validate(current, source="parameter change")
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    return check

"""Declaring and reading the parameter table of `core.parameters` on an rclpy node.

Parameters are declared with their description, default and range, so `ros2 param
describe` documents them. They may be changed with `ros2 param set` only while the node
is unconfigured (they take effect at the next configure); a change in another state, or
a value of the wrong type or out of range, is refused with the reason.

Start-up values (`-p name:=value`, `--params-file`) are checked before they are declared,
so a bad one is a ConfigError with one line saying what to change (the node exits with
it, see node_runtime) instead of rclpy's traceback; an integer given for a number is
taken as that number (users type `temperature:=0`). A name that is no parameter of the
table (`perception.modle`) is logged as a warning naming the closest known one.
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


def _check_overrides(node: Node, specs: list[cfg.ParamSpec]) -> None:
    """Check the start-up values of `specs` (see the module docstring); convert integers
    given for numbers; warn about names no node knows; raise ConfigError on a bad value."""
    overrides = node._parameter_overrides  # noqa: SLF001 - rclpy keeps them only here
    source = f"node {node.get_fully_qualified_name()}"
    errors: list[str] = []
    for spec in specs:
        given = overrides.get(spec.name)
        if given is None:
            continue
        try:
            value = cfg.check_value(spec, given.value, source="")
        except cfg.ConfigError as exc:
            errors.append(str(exc).lstrip(": "))
            continue
        if value is not given.value:
            overrides[spec.name] = Parameter(spec.name, value=value)
    for name in overrides:
        if (name not in cfg.PARAMS_BY_NAME and name not in cfg.ROS_PARAMETERS
                and not name.startswith("qos_overrides.")):
            node.get_logger().warning(
                cfg.unknown_name_message(name, source) + " (the value is ignored)")
    if errors:
        raise ConfigError(f"{source}: bad start-up parameter: " + "; ".join(errors))


def declare_parameters(node: Node, prefixes: Iterable[str]) -> list[str]:
    """Declare every parameter of the given groups ("camera", "keyframes", ... or a top
    level name such as "autostart"); returns the names declared. Raises ConfigError
    when a start-up value is bad (see the module docstring)."""
    names = []
    specs = _selected(prefixes)
    _check_overrides(node, specs)
    for spec in specs:
        descriptor = ParameterDescriptor(name=spec.name, description=spec.description)
        if spec.choices:
            descriptor.additional_constraints = "one of: " + ", ".join(spec.choices)
        if spec.minimum is not None and spec.kind is float:
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(spec.minimum), to_value=1e300, step=0.0)]
        elif spec.minimum is not None and spec.kind is int:
            descriptor.integer_range = [
                IntegerRange(from_value=int(spec.minimum),
                             to_value=int(spec.maximum or cfg.INT_MAXIMUM), step=0)]
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

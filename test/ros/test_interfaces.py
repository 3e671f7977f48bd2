"""The interfaces: error codes defined once (msg/ErrorCode.msg) and equal to the core's,
every response/result field the nodes fill exists in the generated types, and every
interface file is built."""

from __future__ import annotations

import re

import pytest

from embodied_r_ros.core.errors import ErrorCode

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
CONSTANT = re.compile(r"^uint8 ([A-Z_]+)=(\d+)\s*$", re.MULTILINE)


def test_error_codes_are_defined_once_and_match_the_core() -> None:
    defined = {name: int(value) for name, value in
               CONSTANT.findall((REPO / "msg" / "ErrorCode.msg").read_text())}
    assert defined == {code.name: code.value for code in ErrorCode}
    for path in [*REPO.glob("srv/*.srv"), *REPO.glob("action/*.action"),
                 *REPO.glob("msg/*.msg")]:
        if path.name != "ErrorCode.msg":
            assert not CONSTANT.findall(path.read_text()), f"{path.name} redefines error codes"


def test_generated_interfaces_carry_the_same_codes_and_fields() -> None:
    pytest.importorskip("rclpy", reason="needs the ROS 2 wheels (make setup)")
    from embodied_r_ros.action import AnswerSpatial
    from embodied_r_ros.msg import ErrorCode as ErrorCodeMsg
    from embodied_r_ros.msg import SpatialAnswer
    from embodied_r_ros.srv import AskSpatial

    for code in ErrorCode:
        assert getattr(ErrorCodeMsg, code.name) == code.value
    from embodied_r_ros.core.qa.answerer import AnswerResult
    from embodied_r_ros.nodes.common.conversions import fill_result

    result = AnswerResult(success=False, error_code=ErrorCode.EPISODE_RESET, message="m",
                          self_check="inconsistent", self_check_letter="C")
    for target in (AskSpatial.Response(), AnswerSpatial.Result(), SpatialAnswer()):
        fill_result(target, result)
        assert target.error_code == ErrorCode.EPISODE_RESET and target.self_check_letter == "C"


def test_every_interface_file_is_built() -> None:
    cmake = (REPO / "CMakeLists.txt").read_text()
    files = sorted(str(p.relative_to(REPO)) for p in
                   [*REPO.glob("msg/*.msg"), *REPO.glob("srv/*.srv"), *REPO.glob("action/*.action")])
    for f in files:
        assert f'"{f}"' in cmake, f"{f} is not in rosidl_generate_interfaces"

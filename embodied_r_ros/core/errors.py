"""Typed errors shared by the core, the ROS nodes and the training package.

Every failure the package can report maps to one `ErrorCode`. The numeric values are defined
once, as the constants of the ROS message `msg/ErrorCode.msg`; this enum mirrors them for the
ROS-free core (test/ros/test_interfaces.py checks that both agree), so a node copies a code into a
response unchanged.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Failure codes; values match the msg/ErrorCode.msg constants."""

    OK = 0
    NO_KEYFRAMES = 1
    INVALID_REQUEST = 2
    PERCEPTION_FAILED = 3
    REASONING_FAILED = 4
    TIMEOUT = 5
    BUSY = 6
    CANCELLED = 7
    MODEL_UNAVAILABLE = 8
    UNPARSEABLE_ANSWER = 9
    INTERNAL = 10
    EPISODE_RESET = 11
    KEYFRAMES_UNAVAILABLE = 12


class EmbodiedRError(Exception):
    """Base class: carries an `ErrorCode` and a message that says what to do."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class InvalidRequestError(EmbodiedRError):
    """The caller's input is malformed (empty question, too many choices, bad image)."""

    code = ErrorCode.INVALID_REQUEST


class BagError(InvalidRequestError):
    """A rosbag cannot be used: missing, not a rosbag2 folder, unreadable or corrupt, no
    image topic. `path` is the bag; the message names it and says what to do."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.detail = message

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.path, self.detail))  # picklable across processes


class NoKeyFramesError(EmbodiedRError):
    """A question arrived before any camera frame was seen in this episode."""

    code = ErrorCode.NO_KEYFRAMES


class ModelUnavailableError(EmbodiedRError):
    """A model could not be loaded or reached (missing path, bad id, server down)."""

    code = ErrorCode.MODEL_UNAVAILABLE


class BackendError(EmbodiedRError):
    """A model call failed after loading (server error, generation crash).

    `code` is PERCEPTION_FAILED or REASONING_FAILED depending on who raised it.
    """

    code = ErrorCode.INTERNAL


class PerceptionError(BackendError):
    code = ErrorCode.PERCEPTION_FAILED


class ReasoningError(BackendError):
    code = ErrorCode.REASONING_FAILED


class RequestTimeoutError(EmbodiedRError):
    code = ErrorCode.TIMEOUT


class CancelledError(EmbodiedRError):
    code = ErrorCode.CANCELLED


class BusyError(EmbodiedRError):
    code = ErrorCode.BUSY


class EpisodeResetError(EmbodiedRError):
    """The episode was reset (or a new one began) while the question was being answered;
    a question is only ever answered from the episode it was asked in."""

    code = ErrorCode.EPISODE_RESET


class KeyFramesUnavailableError(EmbodiedRError):
    """Split graph: the key-frame node is not running or does not answer."""

    code = ErrorCode.KEYFRAMES_UNAVAILABLE


class ConfigError(EmbodiedRError):
    """A configuration file or parameter is invalid; the message names the key."""

    code = ErrorCode.INVALID_REQUEST


class MemoryStoreError(EmbodiedRError):
    """The persistent key-frame store (core/memory/store.py) cannot be opened or read;
    the message names the file and what to do."""

    code = ErrorCode.INTERNAL

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path

"""Typed errors shared by the core, the ROS nodes and the training package.

Every failure the package can report maps to one `ErrorCode`; the numeric values are the
constants of `srv/AskSpatial.srv` so a node can copy them into a response unchanged.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Failure codes; values match the AskSpatial.srv constants."""

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


class ConfigError(EmbodiedRError):
    """A configuration file or parameter is invalid; the message names the key."""

    code = ErrorCode.INVALID_REQUEST

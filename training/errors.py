"""Typed errors of the training package (subclasses of the core's `EmbodiedRError`).

Each message names the file (or folder) concerned, what was expected there and what to
do, so a wrong download or a wrong command-line flag is recognisable at once.
"""

from __future__ import annotations

from embodied_r_ros.core.errors import InvalidRequestError


class DatasetFileError(InvalidRequestError):
    """A benchmark file is missing, unreadable, or not the kind of file expected."""


class MissingColumnError(DatasetFileError):
    """A benchmark file lacks columns its dataset's published schema has."""


class VideoSourceError(InvalidRequestError):
    """A video root does not exist or holds no videos, or a video cannot be opened."""


class ConfigError(InvalidRequestError, ValueError):
    """A training config (YAML plus --set overrides) contradicts itself; the message names
    the keys and says which to keep."""

"""Splitting work across machines: `--shard i/n`, a deterministic split by name.

A unit of work (a video for perception caching, a bag for replay evaluation) belongs to
shard ``int(sha1(name)[:16], 16) % n``: every machine computes the same split from the
names alone, whatever the order of the records, `--limit` or the machine, and adding
records never moves a unit to another shard. Each shard writes its own append-only
files (``*.shard<i>of<n>.*``); copied into one folder they merge by key, so shard
outputs need no coordination.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from embodied_r_ros.core.errors import InvalidRequestError


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.index, int) and isinstance(self.count, int)
                and self.count >= 1 and 0 <= self.index < self.count):
            raise InvalidRequestError(f"a shard is i/n with 0 <= i < n, got {self.index}/{self.count}")

    def owns(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index

    @property
    def suffix(self) -> str:
        """File-name part of this shard's outputs ("" for the single shard 0/1)."""
        return "" if self.count == 1 else f".shard{self.index}of{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(name: str, count: int) -> int:
    """The shard (0 .. count-1) that the unit `name` belongs to."""
    digest = hashlib.sha1(str(name).encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % count


def parse_shard(text: str) -> Shard:
    """"2/8" -> Shard(2, 8). Raises InvalidRequestError (argparse shows it) otherwise."""
    left, sep, right = str(text).partition("/")
    try:
        if not sep:
            raise ValueError
        return Shard(int(left), int(right))
    except ValueError:
        raise InvalidRequestError(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one): the
    default size of the process pools that use "every core"."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def shard_argument(text: str) -> Shard:
    """`parse_shard` as an argparse `type=`: a bad value becomes a usage error."""
    import argparse

    try:
        return parse_shard(text)
    except InvalidRequestError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

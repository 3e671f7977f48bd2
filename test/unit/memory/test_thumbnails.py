"""Key-frame thumbnails in the store, whichever of image and description comes first.

The reasoning node gets a key frame's image (keyframes topic) and its description
(descriptions topic) on separate subscriptions; under load either can arrive first. Every
test here writes to a real SQLite file through LongTermMemory, as the node does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings
from embodied_r_ros.core.types import FrameDescription


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[LongTermMemory]:
    memory = LongTermMemory(MemorySettings(path=str(tmp_path / "m.sqlite")))
    yield memory
    memory.close()


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (120, 160, 3), dtype=np.uint8)


def _desc(index: int, text: str = "a red box ahead") -> FrameDescription:
    return FrameDescription(index, text, stamp_s=float(index), episode_id="ep")


def _thumbs(memory: LongTermMemory) -> dict[int, bytes | None]:
    assert memory.store.flush(10.0)
    return {r.keyframe_index: r.thumbnail for r in memory.store.records("ep")}


def _is_jpeg(data: bytes | None) -> bool:
    return data is not None and data[:2] == b"\xff\xd8"


def test_image_before_or_after_its_description_gives_a_thumbnail(memory: LongTermMemory) -> None:
    memory.keyframe_image("ep", 0, _image(0))
    memory.record(_desc(0))  # image first
    memory.record(_desc(1))  # description first ...
    assert _thumbs(memory)[1] is None
    memory.keyframe_image("ep", 1, _image(1))  # ... its image later
    thumbs = _thumbs(memory)
    assert _is_jpeg(thumbs[0]) and _is_jpeg(thumbs[1])
    assert thumbs[0] != thumbs[1]


def test_a_late_image_never_replaces_a_thumbnail_or_makes_a_row(memory: LongTermMemory) -> None:
    memory.keyframe_image("ep", 0, _image(0))
    memory.record(_desc(0))
    first = _thumbs(memory)[0]
    memory.keyframe_image("ep", 0, _image(5))  # the same key frame's image again
    memory.keyframe_image("ep", 7, _image(7))  # a key frame never described
    thumbs = _thumbs(memory)
    assert thumbs == {0: first}


def test_a_description_written_again_keeps_the_stored_thumbnail(memory: LongTermMemory) -> None:
    memory.keyframe_image("ep", 3, _image(3))
    memory.record(_desc(3, "first text"))
    first = _thumbs(memory)[3]
    memory.record(_desc(3, "second text"))  # replayed to a restarted node, no image
    assert _thumbs(memory) == {3: first}
    assert memory.store.get("ep", [3])[0].observation == "second text"


def test_no_thumbnails_when_they_are_switched_off(tmp_path: Path) -> None:
    memory = LongTermMemory(MemorySettings(path=str(tmp_path / "m.sqlite"), thumbnail_px=0))
    try:
        memory.record(_desc(0))
        memory.keyframe_image("ep", 0, _image(0))
        memory.keyframe_image("ep", 1, _image(1))
        memory.record(_desc(1))
        assert _thumbs(memory) == {0: None, 1: None}
    finally:
        memory.close()

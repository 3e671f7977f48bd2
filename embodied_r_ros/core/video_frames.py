"""Reading only the frames a video sampler asks for, with bounded memory.

`SampledVideoReader` walks a video file once and decodes only the frames that an
`accept(stamp_s)` callback keeps (stamps are ``frame_number / video_fps``). Two strategies:

- **sequential** (any codec): `cap.grab()` for every frame and `cap.retrieve()` only for
  the kept ones, which skips the colour conversion of dropped frames. Long-GOP codecs
  (H.264, MPEG-4) must still decode every frame, because later frames depend on them.
- **intra** (Motion-JPEG, where every packet is a complete JPEG image): the capture is
  switched to raw-packet mode so skipped frames cost only a file read, and a kept packet is
  decoded with the same FFmpeg decoder and colour conversion OpenCV's capture uses (the
  packet is written to a scratch ``.jpg`` and opened with ``cv2.CAP_FFMPEG``). Before
  using this path, the first frame is decoded both ways and compared; any difference (or
  any failure) falls back to the sequential strategy, so pixels are always identical to a
  plain ``cap.read()`` of the same frame.

Nothing here keeps more than one decoded frame alive.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import cv2
import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError

INTRA_FOURCCS = frozenset({"MJPG", "mjpg", "MJPA", "AVRn", "jpeg", "JPEG", "dmb1"})


@dataclass(frozen=True)
class VideoInfo:
    """Container facts about a video file (frame count may be approximate)."""

    path: str
    fps: float
    frame_count: int
    width: int
    height: int
    fourcc: str


def _fourcc_text(value: float) -> str:
    code = int(value)
    return "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))


def open_capture(path: str | Path) -> tuple[cv2.VideoCapture, VideoInfo]:
    """Open `path` with OpenCV's FFmpeg backend; InvalidRequestError naming the path if not."""
    p = Path(path)
    if not p.is_file():
        raise InvalidRequestError(f"video file not found: {p}")
    cap = cv2.VideoCapture(str(p), cv2.CAP_FFMPEG)
    if not cap.isOpened():
        cap.release()
        raise InvalidRequestError(f"cannot open video (unreadable or unsupported format): {p}")
    fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
    if not np.isfinite(fps) or fps <= 0:
        cap.release()
        raise InvalidRequestError(f"video has no usable frame rate ({fps}): {p}")
    info = VideoInfo(
        path=str(p),
        fps=fps,
        frame_count=max(0, int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)),
        width=int(cap.get(cv2.CAP_PROP_FRAME_WIDTH) or 0),
        height=int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT) or 0),
        fourcc=_fourcc_text(cap.get(cv2.CAP_PROP_FOURCC) or 0),
    )
    return cap, info


class _PacketDecoder:
    """Decodes single Motion-JPEG packets with FFmpeg via a scratch file (one at a time)."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._dir = tempfile.mkdtemp(prefix="er_keyframes_", dir=base)
        self._file = os.path.join(self._dir, "packet.jpg")

    def decode(self, packet: np.ndarray) -> np.ndarray | None:
        """BGR image of one packet, or None if FFmpeg cannot decode it."""
        with open(self._file, "wb") as fh:
            fh.write(np.ascontiguousarray(packet).tobytes())
        cap = cv2.VideoCapture(self._file, cv2.CAP_FFMPEG)
        try:
            ok, image = cap.read()
        finally:
            cap.release()
        return image if ok else None

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class SampledVideoReader:
    """Iterate the frames of a video that a sampler keeps, decoding only those.

    Usage::

        reader = SampledVideoReader(path)
        for frame_number, bgr in reader.iter_sampled(sampler.accept):
            ...
        reader.n_source_frames  # frames seen, known once iteration finishes

    `prefer_intra=False` forces the sequential strategy (used by tests and benchmarks).
    """

    def __init__(self, path: str | Path, *, prefer_intra: bool = True) -> None:
        cap, self.info = open_capture(path)
        cap.release()
        self.path = self.info.path
        self.prefer_intra = prefer_intra
        self.strategy = "sequential"
        self.n_source_frames = 0

    # -- strategy choice ------------------------------------------------------------------
    def _open_intra(self, decoder: _PacketDecoder) -> cv2.VideoCapture | None:
        """A raw-packet capture if the intra path gives identical pixels, else None."""
        if not self.prefer_intra or self.info.fourcc not in INTRA_FOURCCS:
            return None
        plain, _ = open_capture(self.path)
        try:
            ok, expected = plain.read()
        finally:
            plain.release()
        if not ok:
            return None
        raw, _ = open_capture(self.path)
        if not raw.set(cv2.CAP_PROP_FORMAT, -1) or not raw.grab():
            raw.release()
            return None
        ok, packet = raw.retrieve()
        got = decoder.decode(packet) if ok and packet is not None and packet.size else None
        if got is None or got.shape != expected.shape or not np.array_equal(got, expected):
            raw.release()
            return None
        raw.release()
        raw, _ = open_capture(self.path)  # restart from frame 0 in raw mode
        raw.set(cv2.CAP_PROP_FORMAT, -1)
        return raw

    # -- iteration ------------------------------------------------------------------------
    def iter_sampled(self, accept: Callable[[float], bool]) -> Iterator[tuple[int, np.ndarray]]:
        """Yield (source frame number, BGR uint8 image) for every frame `accept` keeps.

        `accept` gets the frame's stream time, ``frame_number / video_fps``.
        """
        fps = self.info.fps
        return self._iter(lambda index: accept(index / fps))

    def read_frames(self, frame_numbers: Iterable[int]) -> dict[int, np.ndarray]:
        """Targeted pass: BGR images of the given source frame numbers (stops after the last)."""
        targets = set(int(n) for n in frame_numbers)
        if not targets:
            return {}
        last = max(targets)
        out: dict[int, np.ndarray] = {}
        frames = self._iter(targets.__contains__, stop_after=last)
        for number, image in frames:
            out[number] = image
        return out

    def _iter(
        self, select: Callable[[int], bool], stop_after: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        decoder = _PacketDecoder()
        cap = None
        try:
            cap = self._open_intra(decoder)
            self.strategy = "intra" if cap is not None else "sequential"
            if cap is None:
                cap, _ = open_capture(self.path)
            index = 0
            while cap.grab():
                if select(index):
                    image = self._retrieve(cap, decoder, index)
                    if image is not None:
                        yield index, image
                if stop_after is not None and index >= stop_after:
                    index += 1
                    break
                index += 1
            if stop_after is None:
                self.n_source_frames = index
        finally:
            if cap is not None:
                cap.release()
            decoder.close()

    def _retrieve(
        self, cap: cv2.VideoCapture, decoder: _PacketDecoder, index: int
    ) -> np.ndarray | None:
        ok, data = cap.retrieve()
        if not ok or data is None:
            return None
        if self.strategy == "intra":
            image = decoder.decode(data)
            if image is None:
                raise InvalidRequestError(f"cannot decode frame {index} of {self.path}")
            return image
        return data

"""Decoding only the sampled frames of a video file, with OpenCV's exact pixels.

The reference numbers frames in the order `cv2.VideoCapture(path).read()` returns them and
converts them to BGR with OpenCV's FFmpeg backend. Every reader here yields
``(frame number, BGR uint8 image)`` for the wanted frame numbers, in increasing order, with
pixels equal to what `cap.read()` gives for that frame number, and holds at most one
decoded frame. Strategies, tried in this order by `strategies_for(fast=True)`:

- **pyav** (`PyAVReader`): FFmpeg through PyAV. A first pass reads the packets only (no
  decoding) and numbers them by presentation time stamp (the decoder outputs frames in that
  order, which is the order `cap.read()` returns them). The decoding pass then sends the
  decoder only what the wanted frames need:
  - the video is cut into closed segments at clean random-access points, after which no
    frame refers to an earlier one: H.264 and HEVC key packets that hold an IDR picture,
    MPEG-4 Part 2 key packets in a stream without B-frames (no reordering), every
    Motion-JPEG packet. In each segment, packets after the last one (in decoding order)
    whose frame is wanted are not sent, and segments without a wanted frame are skipped;
    frames only refer to frames decoded before them, so nothing sent depends on them.
  - for H.264 and MPEG-4 Part 2, a packet whose frame is not wanted is decoded with
    ``skip_frame = NONREF``: the decoder drops it if no other frame refers to it
    (H.264 nal_ref_idc = 0, MPEG-4 B-VOPs) and decodes it otherwise.
  - wanted frames are converted with swscale exactly as OpenCV's backend asks for it
    (BGR24, SWS_BICUBIC flags, the frame's own colour metadata).
  - with `threads` > 1 and more than one closed segment, the segments are decoded side by
    side: each of `threads` decoder threads (single-threaded decoder, its own file handle)
    takes the next segment nobody has taken yet, seeks to it and decodes it; the frames
    are handed on segment by segment, in order (`_SegmentBoard` bounds how far ahead the
    threads may run and how many results wait). Independent chains scale with the cores,
    which FFmpeg's frame threading does not once the skippable frames are skipped. With one
    segment (a single IDR, open GOPs) one decoder runs, frame-threaded with `threads`.
  - the caller's `transform` (ORB features, for key frames) runs on the segment decoder
    threads themselves, each on its own frames, when there are at least `threads`
    segments; otherwise on a pool of `threads` beside the decoding (`ordered_map`).
  Guards: the first wanted frame (frame 0) must equal OpenCV's first frame (catches
  rotation metadata, other conversions, decoder differences); time stamps must exist, be
  unique and come out in increasing order; no packet may be flagged corrupt or discard;
  every wanted frame that the stream has must come out. Any failure raises
  `FastDecodeUnavailable` and the caller falls back to the next strategy (an exception of
  the caller's transform is raised as it is: it is not a decoding problem).
- **intra** (`OpenCVIntraReader`, Motion-JPEG in OpenCV without PyAV): the capture is
  switched to raw-packet mode so skipped frames cost only a file read; a kept packet is
  decoded by OpenCV's FFmpeg backend from a scratch ``.jpg``. The first frame is decoded
  both ways and compared first.
- **sequential** (`OpenCVSequentialReader`, any file OpenCV opens): `cap.grab()` for each
  frame and `cap.retrieve()` for the wanted ones, stopping after the last wanted frame or
  at the first failed grab or retrieve (the reference stops at its first failed read).

`probe_video` opens the file the way the reference does (`cv2.VideoCapture(path)`, default
backend) and reads the frame rate and frame count the sampling rule uses.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Generator, Iterator, Sequence, cast

import cv2
import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.shards import available_cores
from embodied_r_ros.core.video.ordered_map import ordered_map

INTRA_FOURCCS = frozenset({"MJPG", "mjpg", "MJPA", "AVRn", "jpeg", "JPEG", "dmb1"})
STRATEGIES = ("pyav", "intra", "sequential")

# H.264 NAL unit type of an IDR slice; HEVC NAL unit types of IDR pictures.
H264_IDR = frozenset({5})
HEVC_IDR = frozenset({19, 20})
# Decoders whose skip_frame=NONREF drops exactly the frames nothing refers to.
NONREF_CODECS = frozenset({"h264", "mpeg4"})


class FastDecodeUnavailable(Exception):
    """A strategy cannot guarantee OpenCV's exact frames for this file (internal: the
    caller falls back to the next strategy; never raised by the sequential reader)."""


@dataclass(frozen=True)
class VideoInfo:
    """What the reference reads from the container: frame rate and frame count (as
    OpenCV reports them; the count may be approximate), size, codec tag, backend."""

    path: str
    fps: float
    frame_count: int
    width: int
    height: int
    fourcc: str
    backend: str


def _fourcc_text(value: float) -> str:
    code = int(value)
    return "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))


def _check_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InvalidRequestError(f"video file not found: {p}")
    return p


def _open_reference_capture(path: str | Path) -> cv2.VideoCapture:
    """`cv2.VideoCapture(path)` with the default backend, as the reference opens files."""
    p = _check_file(path)
    cap = cv2.VideoCapture(str(p))
    if not cap.isOpened():
        cap.release()
        raise InvalidRequestError(f"cannot open video (unreadable or unsupported format): {p}")
    return cap


def probe_video(path: str | Path) -> VideoInfo:
    """Frame rate, frame count (int of CAP_PROP_FRAME_COUNT), size and codec of a file."""
    return probe_video_and_first_frame(path, read_first=False)[0]


def probe_video_and_first_frame(
    path: str | Path, *, read_first: bool = True
) -> tuple[VideoInfo, np.ndarray | None]:
    """`probe_video` and, from the same capture, frame 0 as `cap.read()` gives it (None if
    it cannot be read or `read_first` is False)."""
    cap = _open_reference_capture(path)
    try:
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        count = cap.get(cv2.CAP_PROP_FRAME_COUNT)
        frame_count = int(count) if np.isfinite(count) else 0
        info = VideoInfo(
            path=str(Path(path)),
            fps=fps,
            frame_count=frame_count,
            width=int(cap.get(cv2.CAP_PROP_FRAME_WIDTH) or 0),
            height=int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT) or 0),
            fourcc=_fourcc_text(cap.get(cv2.CAP_PROP_FOURCC) or 0),
            backend=cap.getBackendName(),
        )
        first = None
        if read_first:
            ok, image = cap.read()
            first = image if ok else None
    finally:
        cap.release()
    return info, first


def read_first_frame(path: str | Path) -> np.ndarray | None:
    """The first frame as the reference's `cap.read()` gives it (None if unreadable)."""
    cap = _open_reference_capture(path)
    try:
        ok, image = cap.read()
    finally:
        cap.release()
    return image if ok else None


def strategies_for(fast: bool, decoder: str = "auto") -> tuple[str, ...]:
    """Strategies to try, in order. decoder "auto": all of STRATEGIES; one of them: that one,
    then "sequential" if it cannot be used. fast=False: "sequential" only."""
    if decoder != "auto" and decoder not in STRATEGIES:
        raise InvalidRequestError(
            f"unknown decoder {decoder!r}; use auto or one of {', '.join(STRATEGIES)}")
    if not fast or decoder == "sequential":
        return ("sequential",)
    if decoder == "auto":
        return STRATEGIES
    return (decoder, "sequential")


@dataclass
class DecodeStats:
    """What a reader did: packets read (frames grabbed, for OpenCV), packets sent to the
    decoder (of which with skip_frame=NONREF, for PyAV) and frames yielded."""

    packets: int = 0
    sent: int = 0
    sent_nonref: int = 0
    yielded: int = 0
    segments: int = 0  # PyAV: closed segments holding a wanted frame
    segment_workers: int = 1  # PyAV: decoders that took those segments side by side
    decode_cpu_s: float = 0.0  # CPU seconds spent decoding and converting, all threads


FirstFrame = Callable[[], "np.ndarray | None"]
# Applied to each wanted frame as (frame number, BGR image), on a worker thread.
Transform = Callable[[int, np.ndarray], Any]
# What `frames()` returns: (frame number, BGR or transform result), in order; closing it
# early stops the decoding at once.
Frames = Generator[tuple[int, Any], None, None]


def make_reader(strategy: str, info: VideoInfo, wanted: Sequence[int],
                first_frame: FirstFrame | None, *, threads: int = 0) -> "SampledReader":
    """A reader of the `wanted` frame numbers with the given strategy. `first_frame`
    returns OpenCV's frame 0 for the fast strategies' pixel check (None: no check, for a
    second pass over a file the strategy already passed). `threads`: worker threads for
    decoding (PyAV) and for a `frames(transform)` function (0 = one per CPU; for PyAV with
    one closed segment, FFmpeg's choice of decoder threads)."""
    if strategy == "pyav":
        return PyAVReader(info, wanted, first_frame, threads=threads)
    if strategy == "intra":
        return OpenCVIntraReader(info, wanted, first_frame, threads=threads)
    if strategy == "sequential":
        return OpenCVSequentialReader(info, wanted, threads=threads)
    raise InvalidRequestError(f"unknown decode strategy {strategy!r}; use one of {STRATEGIES}")


class SampledReader:
    """Base: `frames()` yields (frame number, BGR) for the wanted numbers, in order;
    `frames(transform)` yields (frame number, transform(number, BGR)) instead, with the
    transform run on up to `threads` worker threads beside the decoding."""

    strategy = ""

    def __init__(self, info: VideoInfo, wanted: Sequence[int], *, threads: int = 0) -> None:
        self.info = info
        self.wanted = sorted({int(i) for i in wanted if int(i) >= 0})
        self.stats = DecodeStats()
        self.threads = threads

    def worker_threads(self) -> int:
        """Threads for the transform (and PyAV's segment decoders): `threads`, or one per
        CPU this process may use when 0."""
        return self.threads if self.threads > 0 else available_cores()

    def frames(self, transform: Transform | None = None,
               *, buffer_frames: int | None = None) -> Frames:
        """The wanted frames in increasing order: (number, BGR uint8), or (number,
        transform(number, BGR)) with a transform. `buffer_frames`: results of the transform
        that may wait for the consumer per decoder thread where the decoder threads run
        the transform themselves (PyAV segments; default 4, raise it when the result is
        small). Elsewhere at most 2 * threads + 1 frames wait for or in the transform."""
        source = self._decoded()
        if transform is None:
            return source
        workers = self.worker_threads()
        return ordered_map(source, transform, workers)  # 2 * workers + 1 frames at most

    def _decoded(self) -> Generator[tuple[int, np.ndarray], None, None]:
        raise NotImplementedError


# -- OpenCV -------------------------------------------------------------------------------


class OpenCVSequentialReader(SampledReader):
    """grab() every frame, retrieve() the wanted ones; pixels are cap.read()'s by design."""

    strategy = "sequential"

    def _decoded(self) -> Generator[tuple[int, np.ndarray], None, None]:
        if not self.wanted:
            return
        wanted = set(self.wanted)
        last = self.wanted[-1]
        cap = _open_reference_capture(self.info.path)
        try:
            index = 0
            while index <= last:
                t0 = time.thread_time()
                grabbed = cap.grab()
                ok, image = cap.retrieve() if grabbed and index in wanted else (False, None)
                self.stats.decode_cpu_s += time.thread_time() - t0
                if not grabbed:
                    break
                self.stats.packets += 1
                self.stats.sent += 1  # grab() decodes every frame
                if index in wanted:
                    if not ok or image is None:
                        return  # cap.read() would fail here: the reference stops reading
                    self.stats.yielded += 1
                    yield index, image
                    del image
                index += 1
        finally:
            cap.release()


class _PacketDecoder:
    """Decodes single Motion-JPEG packets with OpenCV's FFmpeg backend via a scratch file."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._dir = tempfile.mkdtemp(prefix="er_keyframes_", dir=base)
        self._file = os.path.join(self._dir, "packet.jpg")

    def decode(self, packet: np.ndarray) -> np.ndarray | None:
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


class OpenCVIntraReader(SampledReader):
    """Motion-JPEG: raw packets, only the wanted ones decoded (checked on frame 0)."""

    strategy = "intra"

    def __init__(self, info: VideoInfo, wanted: Sequence[int],
                 first_frame: FirstFrame | None, *, threads: int = 0) -> None:
        super().__init__(info, wanted, threads=threads)
        self._first_frame = first_frame

    def _raw_capture(self) -> cv2.VideoCapture:
        cap = cv2.VideoCapture(self.info.path, cv2.CAP_FFMPEG)
        if not cap.isOpened() or not cap.set(cv2.CAP_PROP_FORMAT, -1):
            cap.release()
            raise FastDecodeUnavailable("raw packet mode is not available")
        return cap

    def _verify(self, decoder: _PacketDecoder) -> None:
        if self.info.fourcc not in INTRA_FOURCCS or self.info.backend != "FFMPEG":
            raise FastDecodeUnavailable(f"not Motion-JPEG through FFmpeg ({self.info.fourcc!r})")
        if self._first_frame is None:
            return
        expected = self._first_frame()
        cap = self._raw_capture()
        try:
            ok = cap.grab()
            ok, packet = cap.retrieve() if ok else (False, None)
        finally:
            cap.release()
        got = decoder.decode(packet) if ok and packet is not None and packet.size else None
        if expected is None or got is None or got.shape != expected.shape \
                or not np.array_equal(got, expected):
            raise FastDecodeUnavailable("packet decode differs from cap.read() on frame 0")

    def _decoded(self) -> Generator[tuple[int, np.ndarray], None, None]:
        if not self.wanted:
            return
        decoder = _PacketDecoder()
        try:
            self._verify(decoder)
            wanted = set(self.wanted)
            last = self.wanted[-1]
            cap = self._raw_capture()
            try:
                index = 0
                while index <= last and cap.grab():
                    self.stats.packets += 1
                    if index in wanted:
                        t0 = time.thread_time()
                        ok, data = cap.retrieve()
                        image = decoder.decode(data) if ok and data is not None else None
                        self.stats.decode_cpu_s += time.thread_time() - t0
                        if image is None:
                            raise FastDecodeUnavailable(f"packet {index} does not decode alone")
                        self.stats.sent += 1
                        self.stats.yielded += 1
                        yield index, image
                    index += 1
            finally:
                cap.release()
        finally:
            decoder.close()


# -- PyAV -----------------------------------------------------------------------------------


def nal_unit_spans(data: bytes, length_size: int | None) -> list[tuple[int, int]] | None:
    """(start, end) of each NAL unit in an H.264/HEVC packet, start at the NAL header
    byte: length-prefixed units if `length_size`, else Annex B start codes (an end then
    runs to the next start code). None if the packet does not parse."""
    spans: list[tuple[int, int]] = []
    if length_size:
        i, n = 0, len(data)
        while i < n:
            if i + length_size > n:
                return None
            size = int.from_bytes(data[i:i + length_size], "big")
            i += length_size
            if size <= 0 or i + size > n:
                return None
            spans.append((i, i + size))
            i += size
        return spans
    starts: list[int] = []
    j = data.find(b"\x00\x00\x01")
    while j >= 0 and j + 3 < len(data):
        starts.append(j + 3)
        j = data.find(b"\x00\x00\x01", j + 3)
    ends = [k - 3 for k in starts[1:]] + [len(data)]
    return list(zip(starts, ends)) or None


def _nal_types(data: bytes, length_size: int | None, hevc: bool) -> list[int] | None:
    """NAL unit types in an H.264/HEVC packet; None if the packet does not parse."""
    spans = nal_unit_spans(data, length_size)
    if spans is None:
        return None
    return [(data[a] >> 1) & 0x3F if hevc else data[a] & 0x1F for a, _ in spans]


def nal_length_size(codec: str, extradata: bytes | None) -> int | None:
    """NAL length-field size from avcC / hvcC extradata; None for Annex B streams."""
    if not extradata:
        return None
    if codec == "h264" and extradata[0] == 1 and len(extradata) >= 5:
        return (extradata[4] & 0x03) + 1
    if codec == "hevc" and len(extradata) >= 23 and extradata[0] == 1:
        return (extradata[21] & 0x03) + 1
    return None


@dataclass
class _Plan:
    pts: list[int]
    rank: list[int]  # presentation position (= cap.read() number) of each packet
    send: list[bool]
    nonref: list[bool]
    last_sent: int
    rank_of_pts: dict[int, int]
    # Closed segments holding a wanted frame, as packet ranges [first, last sent + 1), in
    # decoding order; the first packet of each is a clean random-access point (or packet 0).
    segments: list[tuple[int, int]]


FrameCheck = Callable[[int, np.ndarray], None]


class _Sender:
    """Sends planned packets to one decoder (skip_frame=NONREF for those whose frame is not
    wanted), counts them and the CPU time spent, converts the wanted frames that come out and
    passes each to `check` (which raises if the pixels cannot be trusted)."""

    def __init__(self, plan: _Plan, wanted: set[int], check: FrameCheck) -> None:
        self.plan, self.wanted, self.check = plan, wanted, check
        self.skip = "DEFAULT"
        self.sent = self.sent_nonref = 0
        self.cpu_s = 0.0

    def send(self, ctx: Any, packet: Any, i: int) -> Iterator[tuple[int, np.ndarray]]:
        mode = "NONREF" if self.plan.nonref[i] else "DEFAULT"
        if mode != self.skip:
            ctx.skip_frame = self.skip = mode
        self.sent += 1
        self.sent_nonref += self.plan.nonref[i]
        t0 = time.thread_time()
        frames = ctx.decode(packet)
        self.cpu_s += time.thread_time() - t0
        return self._wanted(frames)

    def drain(self, ctx: Any) -> Iterator[tuple[int, np.ndarray]]:
        """The frames the decoder still holds (end of the file or of a segment)."""
        t0 = time.thread_time()
        frames = ctx.decode(None)
        self.cpu_s += time.thread_time() - t0
        return self._wanted(frames)

    def _wanted(self, frames: Any) -> Iterator[tuple[int, np.ndarray]]:
        for frame in frames:
            if frame.pts is None or frame.pts not in self.plan.rank_of_pts:
                raise FastDecodeUnavailable("decoded frame with an unknown time stamp")
            number = self.plan.rank_of_pts[frame.pts]
            if number in self.wanted:
                t0 = time.thread_time()
                # OpenCV's backend: sws_scale to BGR24 with SWS_BICUBIC, frame colour metadata.
                image = frame.reformat(format="bgr24", interpolation="BICUBIC").to_ndarray()
                self.cpu_s += time.thread_time() - t0
                self.check(number, image)
                yield number, image

    def add_to(self, stats: DecodeStats) -> None:
        stats.sent += self.sent
        stats.sent_nonref += self.sent_nonref
        stats.decode_cpu_s += self.cpu_s


_SEGMENT_DONE = object()
_SEGMENT_BUFFER = 4  # results per decoder thread that may wait ahead of the consumer


class _SegmentBoard:
    """Where segment decoders and the consumer meet.

    Decoders `take` closed segments in order, each the next one nobody has taken, and
    `put` the items of a segment; the consumer `get`s the items segment by segment, in
    order. Bounds: a decoder may start a segment at most `lookahead` segments after the one
    being read; items of segments not being read yet wait only while fewer than `hold` of
    them are buffered, and the segment being read buffers at most `hold` items. The decoder
    of the segment being read waits only for the consumer, so the consumer always makes
    progress, and at most 2 * `hold` items (plus one per decoder) are held.
    """

    def __init__(self, total: int, lookahead: int, hold: int) -> None:
        self.total, self.lookahead, self.hold = total, max(1, lookahead), max(1, hold)
        self._cond = threading.Condition()
        self._next = 0  # next segment to hand to a decoder
        self._reading = 0  # segment the consumer reads
        self._items: dict[int, deque] = {}
        self._done: set[int] = set()
        self._ahead = 0  # items buffered for segments after the one being read
        self._error: BaseException | None = None
        self.stopped = False

    def take(self) -> int | None:
        """The next segment for a decoder, None when there is none or the board stopped."""
        with self._cond:
            while not self.stopped and self._reading + self.lookahead < self._next < self.total:
                self._cond.wait(timeout=1.0)
            if self.stopped or self._next >= self.total:
                return None
            number = self._next
            self._next += 1
            self._items[number] = deque()
            return number

    def _full(self, segment: int) -> bool:
        if segment == self._reading:  # the consumer is taking these: it frees room itself
            return len(self._items[segment]) >= self.hold
        return self._ahead >= self.hold

    def put(self, segment: int, item: object) -> bool:
        """Hand on one item of `segment`; False if the board stopped (the decoder quits)."""
        with self._cond:
            while not self.stopped and self._full(segment):
                self._cond.wait(timeout=1.0)
            if self.stopped:
                return False
            self._items[segment].append(item)
            if segment != self._reading:
                self._ahead += 1
            self._cond.notify_all()
            return True

    def finish(self, segment: int) -> None:
        with self._cond:
            self._done.add(segment)
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        """Record a decoder's failure; the consumer raises it at its next `get`."""
        with self._cond:
            if self._error is None:
                self._error = exc
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()

    def get(self, segment: int, decoders_alive: Callable[[], bool]) -> object:
        """The next item of `segment` (segments are read in increasing order), or
        _SEGMENT_DONE after its last item."""
        with self._cond:
            if segment != self._reading:
                self._reading = segment
                self._ahead -= len(self._items.get(segment, ()))
                self._cond.notify_all()  # room ahead again, and decoders may start more
            while True:
                if self._error is not None:
                    raise self._error
                items = self._items.get(segment)
                if items:
                    if len(items) >= self.hold:
                        self._cond.notify_all()  # its decoder may be waiting for room
                    return items.popleft()
                if segment in self._done:
                    del self._items[segment]
                    return _SEGMENT_DONE
                if not decoders_alive():
                    raise FastDecodeUnavailable("a segment decoder ended early")
                self._cond.wait(timeout=1.0)


class PyAVReader(SampledReader):
    """FFmpeg via PyAV, decoding only what the wanted frames need: closed segments side by
    side (each decoder thread also runs the transform on its frames), or one frame-threaded
    decoder when the file has a single closed segment."""

    strategy = "pyav"

    def __init__(self, info: VideoInfo, wanted: Sequence[int],
                 first_frame: FirstFrame | None, *, threads: int = 0) -> None:
        super().__init__(info, wanted, threads=threads)
        self._first_frame = first_frame

    @staticmethod
    def _av():
        try:
            import av  # optional at import time, required for this strategy
        except ImportError as exc:
            raise FastDecodeUnavailable(f"PyAV is not installed ({exc})") from exc
        return av

    def _open(self, av):
        try:
            container = av.open(self.info.path)
        except Exception as exc:  # noqa: BLE001 - any open failure means: use OpenCV
            raise FastDecodeUnavailable(f"PyAV cannot open the file ({exc})") from exc
        if not container.streams.video:
            container.close()
            raise FastDecodeUnavailable("no video stream")
        return container

    def _plan(self, av) -> _Plan:
        container = self._open(av)
        try:
            stream = container.streams.video[0]
            codec = stream.codec_context.name
            length_size = nal_length_size(codec, stream.codec_context.extradata)
            pts: list[int] = []
            clean: list[bool] = []
            keyframes: list[bool] = []
            for packet in container.demux(stream):
                if packet.size == 0:
                    if packet.pts is None and packet.dts is None:
                        continue  # the demuxer's end-of-stream packet
                    raise FastDecodeUnavailable("empty packet inside the stream")
                if packet.pts is None:
                    raise FastDecodeUnavailable("packet without a time stamp")
                if packet.is_corrupt or packet.is_discard:
                    raise FastDecodeUnavailable("packet flagged corrupt or discard")
                pts.append(int(packet.pts))
                key = bool(packet.is_keyframe)
                keyframes.append(key)
                is_clean = False
                if key and codec in ("h264", "hevc"):
                    types = _nal_types(bytes(packet), length_size, codec == "hevc")
                    idr = HEVC_IDR if codec == "hevc" else H264_IDR
                    is_clean = types is not None and any(t in idr for t in types)
                elif key and codec == "mjpeg":
                    is_clean = True
                clean.append(is_clean)
        except FastDecodeUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - demuxing failed: use OpenCV
            raise FastDecodeUnavailable(f"PyAV cannot read the packets ({exc})") from exc
        finally:
            container.close()
        n = len(pts)
        if len(set(pts)) != n:
            raise FastDecodeUnavailable("duplicate time stamps")
        order = sorted(range(n), key=pts.__getitem__)
        rank = [0] * n
        for position, packet_index in enumerate(order):
            rank[packet_index] = position
        reordered = any(pts[i] > pts[i + 1] for i in range(n - 1))
        if codec == "mpeg4" and not reordered:
            clean = list(keyframes)  # I-VOPs without B-VOPs: nothing refers back past them
        wanted = set(self.wanted)
        send = [False] * n
        segments: list[tuple[int, int]] = []
        starts = [0] + [i for i in range(1, n) if clean[i]] + [n]
        for a, b in zip(starts[:-1], starts[1:]):
            last = -1
            for i in range(a, b):
                if rank[i] in wanted:
                    last = i
            for i in range(a, last + 1):
                send[i] = True
            if last >= 0:
                segments.append((a, last + 1))
        nonref = [codec in NONREF_CODECS and send[i] and rank[i] not in wanted
                  for i in range(n)]
        last_sent = max((i for i in range(n) if send[i]), default=-1)
        return _Plan(pts, rank, send, nonref, last_sent, dict(zip(pts, rank)), segments)

    def frames(self, transform: Transform | None = None,
               *, buffer_frames: int | None = None) -> Frames:
        if not self.wanted:
            return
        av = self._av()
        plan = self._plan(av)
        n = len(plan.pts)
        self.stats.packets = n
        reachable = [i for i in self.wanted if i < n]
        wanted = set(reachable)
        expected_first: np.ndarray | None = None
        if self._first_frame is not None:
            if not reachable or reachable[0] != 0:
                raise FastDecodeUnavailable("frame 0 is not wanted: cannot check pixels")
            expected_first = self._first_frame()
            if expected_first is None:
                raise FastDecodeUnavailable("OpenCV cannot read frame 0")

        def check(number: int, image: np.ndarray) -> None:
            if number == 0 and expected_first is not None and (
                    image.shape != expected_first.shape
                    or not np.array_equal(image, expected_first)):
                raise FastDecodeUnavailable("frame 0 differs from cap.read()")

        workers = self.segment_workers(len(plan.segments))
        self.stats.segments, self.stats.segment_workers = len(plan.segments), workers
        pool = self.worker_threads()
        # Decoder threads run the transform themselves when there is one per worker thread;
        # with fewer segments than that, a pool of `pool` threads runs it beside them.
        fused = transform is not None and 1 < workers >= pool
        produced: Generator[tuple[int, Any], None, None]
        if workers > 1:
            hold = (buffer_frames or _SEGMENT_BUFFER) if fused else _SEGMENT_BUFFER
            produced = self._frames_by_segment(av, plan, wanted, check,
                                               transform if fused else None, workers,
                                               hold=hold * workers)
        else:
            produced = self._frames_in_one_decoder(av, plan, wanted, check)
        if transform is not None and not fused:  # frames wait for the pool: keep it short
            produced = ordered_map(produced, transform, pool)
        last = -1
        try:
            for number, item in produced:
                if number <= last:
                    raise FastDecodeUnavailable("frames came out of presentation order")
                self.stats.yielded += 1
                last = number
                yield number, item
                del item
        finally:
            produced.close()  # stops the decoders at once when the caller stops early
        if self.stats.yielded != len(reachable):
            raise FastDecodeUnavailable(
                f"{len(reachable) - self.stats.yielded} wanted frame(s) did not come out"
            )

    def segment_workers(self, segments: int) -> int:
        """Decoder threads that take the closed segments side by side (1: one decoder for
        the whole file, frame-threaded with `threads`)."""
        return max(1, min(self.worker_threads(), segments)) if segments > 1 else 1

    def _frames_in_one_decoder(self, av: ModuleType, plan: _Plan, wanted: set[int],
                               check: FrameCheck) -> Generator[tuple[int, np.ndarray], None, None]:
        container = self._open(av)
        n = len(plan.pts)
        sender = _Sender(plan, wanted, check)
        try:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = self.threads  # 1: no decoder threads at all
            if self.threads != 1:
                stream.thread_type = "AUTO"  # frame and slice threading
            ctx = stream.codec_context
            i = 0
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                if i >= n or packet.pts != plan.pts[i]:
                    raise FastDecodeUnavailable("packets changed between passes")
                if plan.send[i]:
                    yield from sender.send(ctx, packet, i)
                i += 1
                if i > plan.last_sent:
                    break
            yield from sender.drain(ctx)
        except FastDecodeUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a decode error: OpenCV decides what it does
            raise FastDecodeUnavailable(f"PyAV decoding failed ({exc})") from exc
        finally:
            container.close()
            sender.add_to(self.stats)

    def _frames_by_segment(self, av: ModuleType, plan: _Plan, wanted: set[int],
                           check: FrameCheck, transform: Transform | None, workers: int,
                           *, hold: int) -> Generator[tuple[int, Any], None, None]:
        """Closed segments decoded side by side: each of `workers` threads, with a decoder
        of its own (a fresh decoder at a clean random-access point gives the same pixels as
        one that decoded everything before it), takes the next segment nobody has taken,
        decodes it and applies `transform` to its wanted frames; the results are handed on
        segment by segment, so they come out in increasing order (see _SegmentBoard for the
        bounds: at most `hold` results wait ahead of the segment being read)."""
        index_of_pts = {pts: i for i, pts in enumerate(plan.pts)}
        board = _SegmentBoard(len(plan.segments), lookahead=2 * workers, hold=hold)
        senders = [_Sender(plan, wanted, check) for _ in range(workers)]
        threads = [threading.Thread(target=self._segment_worker, name=f"pyav-segments-{k}",
                                    args=(av, plan, index_of_pts, board, senders[k], transform),
                                    daemon=True)
                   for k in range(workers)]
        for thread in threads:
            thread.start()

        def alive() -> bool:
            return any(thread.is_alive() for thread in threads)

        try:
            for segment in range(len(plan.segments)):
                while (item := board.get(segment, alive)) is not _SEGMENT_DONE:
                    yield cast(tuple[int, Any], item)
        finally:
            board.stop()  # decoders waiting on the board see it at once
            for thread in threads:
                thread.join()
            for sender in senders:
                sender.add_to(self.stats)

    def _segment_worker(self, av: ModuleType, plan: _Plan, index_of_pts: dict[int, int],
                        board: _SegmentBoard, sender: _Sender,
                        transform: Transform | None) -> None:
        container = None
        try:
            container = self._open(av)
            stream = container.streams.video[0]
            ctx = stream.codec_context
            ctx.thread_count = 1  # the segments are the parallelism
            while (segment := board.take()) is not None:
                first, end = plan.segments[segment]
                container.seek(plan.pts[first], stream=stream, backward=True)
                i = -1
                for packet in container.demux(stream):
                    if board.stopped:
                        return
                    if packet.size == 0:
                        continue
                    if i < 0:  # where did the seek land? at or before the segment's start
                        i = index_of_pts.get(packet.pts, first + 1)
                        if i > first:
                            raise FastDecodeUnavailable("seeking missed a segment's first packet")
                    elif i >= len(plan.pts) or packet.pts != plan.pts[i]:
                        raise FastDecodeUnavailable("packets changed between passes")
                    if i >= first and plan.send[i]:
                        for number, image in sender.send(ctx, packet, i):
                            if not self._hand_on(board, segment, number, image, transform):
                                return
                    i += 1
                    if i >= end:
                        break
                for number, image in sender.drain(ctx):
                    if not self._hand_on(board, segment, number, image, transform):
                        return
                ctx.flush_buffers()
                board.finish(segment)
        except _TransformFailed as failed:
            board.fail(failed.error)  # the caller's own error, raised as it is
        except FastDecodeUnavailable as exc:
            board.fail(exc)
        except Exception as exc:  # noqa: BLE001 - any decode error: OpenCV decides what that file gives
            board.fail(FastDecodeUnavailable(f"PyAV decoding failed ({exc})"))
        finally:
            if container is not None:
                container.close()

    @staticmethod
    def _hand_on(board: _SegmentBoard, segment: int, number: int, image: np.ndarray,
                 transform: Transform | None) -> bool:
        if transform is None:
            return board.put(segment, (number, image))
        try:
            result = transform(number, image)
        except Exception as exc:  # not a decoding problem: no fallback
            raise _TransformFailed(exc) from exc
        return board.put(segment, (number, result))


class _TransformFailed(Exception):
    """Carries an exception of the caller's transform out of a segment decoder."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error

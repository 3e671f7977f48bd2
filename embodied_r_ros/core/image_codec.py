"""Image conversion between ROS message fields and RGB numpy arrays, without ROS.

The ROS nodes and the rosbag reader both receive images as plain fields (the bytes of
`sensor_msgs/Image.data` plus width, height, encoding and step, or the bytes and format of
`sensor_msgs/CompressedImage`). This module turns those fields into the one image form the
core uses everywhere: an RGB ``uint8`` array of shape (H, W, 3), contiguous and owning its
memory, and back.

Supported raw encodings (names as in ``sensor_msgs/image_encodings.hpp``):

- colour: ``rgb8``, ``bgr8``, ``rgba8``, ``bgra8`` (alpha is dropped), ``8UC3`` (read as
  BGR, the OpenCV convention), ``8UC4`` (read as BGRA);
- grey: ``mono8`` / ``8UC1``, ``mono16`` / ``16UC1`` (scaled from 0..65535 to 0..255 with a
  fixed factor, so brightness is comparable between frames);
- packed YUV 4:2:2: ``yuv422`` / ``uyvy`` (byte order U Y V Y) and ``yuv422_yuy2`` / ``yuyv``
  (Y U Y V);
- Bayer mosaics: ``bayer_rggb8``, ``bayer_bggr8``, ``bayer_gbrg8``, ``bayer_grbg8``.

Every failure (unknown encoding, a buffer that does not match the stated size, an image
that cannot be decoded) raises `InvalidRequestError` with a message naming the problem. So
does a frame more than MAX_ASPECT_RATIO times longer one way than the other: no camera
makes one, and image models refuse it (the Qwen2-VL processors at 200:1), so it would
otherwise become a key frame that can never be described.
"""

from __future__ import annotations

import cv2
import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError

__all__ = [
    "MAX_ASPECT_RATIO",
    "check_frame_shape",
    "SUPPORTED_ENCODINGS",
    "bytes_per_pixel",
    "encode_jpeg",
    "encode_png",
    "image_from_compressed",
    "image_from_raw",
    "rgb_to_raw",
]

MAX_ASPECT_RATIO = 100  # longer side / shorter side of an accepted frame


def check_frame_shape(width: int, height: int) -> None:
    """Raise InvalidRequestError for a frame longer than MAX_ASPECT_RATIO:1 either way."""
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise InvalidRequestError(
            f"image {width}x{height} is more than {MAX_ASPECT_RATIO} times longer one way than "
            "the other: not a camera frame (image models refuse such shapes)")


# encoding -> (bytes per pixel, channels of the stored array, element dtype)
_LAYOUT: dict[str, tuple[int, int, str]] = {
    "rgb8": (3, 3, "u1"),
    "bgr8": (3, 3, "u1"),
    "8uc3": (3, 3, "u1"),
    "rgba8": (4, 4, "u1"),
    "bgra8": (4, 4, "u1"),
    "8uc4": (4, 4, "u1"),
    "mono8": (1, 1, "u1"),
    "8uc1": (1, 1, "u1"),
    "mono16": (2, 1, "u2"),
    "16uc1": (2, 1, "u2"),
    "yuv422": (2, 2, "u1"),
    "uyvy": (2, 2, "u1"),
    "yuv422_yuy2": (2, 2, "u1"),
    "yuyv": (2, 2, "u1"),
    "bayer_rggb8": (1, 1, "u1"),
    "bayer_bggr8": (1, 1, "u1"),
    "bayer_gbrg8": (1, 1, "u1"),
    "bayer_grbg8": (1, 1, "u1"),
}

SUPPORTED_ENCODINGS: tuple[str, ...] = tuple(sorted(_LAYOUT))

# Encodings rgb_to_raw can produce.
_OUTPUT_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16")

# OpenCV's Bayer constant names are written from the second row's point of view, so a
# ROS "rggb" mosaic is OpenCV's "BG" pattern (and so on); converting to RGB directly.
_BAYER_TO_RGB = {
    "bayer_rggb8": cv2.COLOR_BayerBG2RGB,
    "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg8": cv2.COLOR_BayerGR2RGB,
    "bayer_grbg8": cv2.COLOR_BayerGB2RGB,
}


def bytes_per_pixel(encoding: str) -> int:
    """Bytes one pixel takes in a raw image of this encoding (raises if unsupported)."""
    return _layout(encoding)[0]


def _layout(encoding: str) -> tuple[int, int, str]:
    key = (encoding or "").strip().lower()
    if key not in _LAYOUT:
        raise InvalidRequestError(
            f"unsupported image encoding {encoding!r}; supported: {', '.join(SUPPORTED_ENCODINGS)}"
        )
    return _LAYOUT[key]


def _as_byte_buffer(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """A flat uint8 view of any bytes-like object or numpy array (no copy when possible)."""
    if isinstance(data, np.ndarray):
        arr = np.ascontiguousarray(data)
        return arr.reshape(-1).view(np.uint8)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, dtype=np.uint8)
    raise InvalidRequestError(
        f"image data must be bytes, memoryview or a numpy array, not {type(data).__name__}"
    )


def _scale16(values: np.ndarray) -> np.ndarray:
    """Map 16-bit values onto 0..255 with a fixed factor (65535 -> 255, rounding)."""
    return ((values.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def image_from_raw(
    data: bytes | bytearray | memoryview | np.ndarray,
    width: int,
    height: int,
    encoding: str,
    step: int,
    is_bigendian: int | bool = 0,
) -> np.ndarray:
    """Decode the fields of a ``sensor_msgs/Image`` into an RGB uint8 (H, W, 3) array.

    ``step`` is the row length in bytes; rows may carry padding after the pixels, which is
    skipped. A ``step`` of 0 is read as "no padding". The buffer must hold exactly
    ``step * height`` bytes. ``is_bigendian`` matters only for 16-bit encodings.
    """
    width, height, step = int(width), int(height), int(step)
    if width <= 0 or height <= 0:
        raise InvalidRequestError(f"image size must be positive, got {width}x{height}")
    check_frame_shape(width, height)
    bpp, channels, dtype = _layout(encoding)
    key = encoding.strip().lower()
    row_bytes = width * bpp
    if step == 0:
        step = row_bytes
    if step < row_bytes:
        raise InvalidRequestError(
            f"image step {step} is smaller than width*bytes_per_pixel = {row_bytes} "
            f"for {width} px of {encoding}"
        )
    if key in ("yuv422", "uyvy", "yuv422_yuy2", "yuyv") and width % 2:
        raise InvalidRequestError(f"{encoding} needs an even width, got {width}")
    buf = _as_byte_buffer(data)
    expected = step * height
    if buf.size != expected:
        raise InvalidRequestError(
            f"image data has {buf.size} bytes but step*height = {step}*{height} = {expected}"
        )
    rows = buf.reshape(height, step)[:, :row_bytes]
    if dtype == "u2":
        order = ">" if is_bigendian else "<"
        wide = np.ascontiguousarray(rows).view(np.dtype(order + "u2")).reshape(height, width)
        grey = _scale16(wide)
        return np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
    pixels: np.ndarray = (np.ascontiguousarray(rows).reshape(height, width, channels)
                          if channels > 1 else np.ascontiguousarray(rows).reshape(height, width))
    if key == "rgb8":
        out = pixels
    elif key in ("bgr8", "8uc3"):
        out = pixels[:, :, ::-1]
    elif key == "rgba8":
        out = pixels[:, :, :3]
    elif key in ("bgra8", "8uc4"):
        out = pixels[:, :, 2::-1]
    elif key in ("mono8", "8uc1"):
        out = np.repeat(pixels[:, :, None], 3, axis=2)
    elif key in ("yuv422", "uyvy"):
        out = cv2.cvtColor(pixels, cv2.COLOR_YUV2RGB_UYVY)
    elif key in ("yuv422_yuy2", "yuyv"):
        out = cv2.cvtColor(pixels, cv2.COLOR_YUV2RGB_YUY2)
    else:  # Bayer
        out = cv2.cvtColor(pixels, _BAYER_TO_RGB[key])
    return np.array(out, dtype=np.uint8, order="C", copy=True)


def _compressed_format_kind(fmt: str) -> str:
    """'depth' for compressedDepth payloads, else 'image'."""
    return "depth" if "compresseddepth" in (fmt or "").lower().replace(" ", "") else "image"


def image_from_compressed(data: bytes | bytearray | memoryview | np.ndarray, format: str = "") -> np.ndarray:
    """Decode a ``sensor_msgs/CompressedImage`` payload (JPEG, PNG, ...) to RGB uint8.

    ``format`` is the message's format string ("jpeg", "png", "bgr8; jpeg compressed bgr8",
    "16UC1; compressedDepth png"); the codec itself is detected from the bytes, so the
    string only matters for ``compressedDepth`` (which carries a 12-byte header before the
    PNG). Grey and 16-bit images come back as three equal channels; alpha is dropped.
    """
    buf = _as_byte_buffer(data)
    if _compressed_format_kind(format) == "depth":
        # image_transport's compressedDepth: 4-byte format enum + 2 float32 quantisation
        # parameters, then a PNG (or RVL, unsupported here).
        if buf.size > 12 and bytes(buf[12:16]) == b"\x89PNG":
            buf = buf[12:]
    if buf.size == 0:
        raise InvalidRequestError("compressed image payload is empty")
    decoded = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if decoded is None:
        raise InvalidRequestError(
            f"could not decode compressed image ({buf.size} bytes, format {format!r})"
        )
    if decoded.dtype == np.uint16:
        decoded = _scale16(decoded)
    elif decoded.dtype != np.uint8:
        raise InvalidRequestError(f"compressed image has unsupported depth {decoded.dtype}")
    if decoded.ndim == 2:
        out = np.repeat(decoded[:, :, None], 3, axis=2)
    elif decoded.shape[2] == 4:
        out = cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGB)
    elif decoded.shape[2] == 3:
        out = cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    elif decoded.shape[2] == 1:
        out = np.repeat(decoded, 3, axis=2)
    else:
        raise InvalidRequestError(f"compressed image has {decoded.shape[2]} channels")
    check_frame_shape(out.shape[1], out.shape[0])
    return np.ascontiguousarray(out)


def _check_rgb(image: np.ndarray) -> np.ndarray:
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidRequestError(f"expected an RGB image of shape (H, W, 3), got {arr.shape}")
    if arr.dtype != np.uint8:
        raise InvalidRequestError(f"expected a uint8 image, got {arr.dtype}")
    return arr


def rgb_to_raw(image: np.ndarray, encoding: str = "rgb8") -> tuple[bytes, int]:
    """Encode an RGB uint8 image as the ``data`` and ``step`` of a ``sensor_msgs/Image``.

    Supported encodings: rgb8, bgr8, rgba8, bgra8 (alpha 255), mono8 (luma), mono16
    (luma * 257, little-endian). Rows are packed (no padding).
    """
    arr = _check_rgb(image)
    key = (encoding or "").strip().lower()
    if key not in _OUTPUT_ENCODINGS:
        raise InvalidRequestError(
            f"cannot encode to {encoding!r}; supported: {', '.join(_OUTPUT_ENCODINGS)}"
        )
    h, w = arr.shape[:2]
    if key == "rgb8":
        out = np.ascontiguousarray(arr)
    elif key == "bgr8":
        out = np.ascontiguousarray(arr[:, :, ::-1])
    elif key == "rgba8":
        out = np.dstack([arr, np.full((h, w), 255, np.uint8)])
    elif key == "bgra8":
        out = np.dstack([arr[:, :, ::-1], np.full((h, w), 255, np.uint8)])
    elif key == "mono8":
        out = cv2.cvtColor(np.ascontiguousarray(arr), cv2.COLOR_RGB2GRAY)
    else:  # mono16
        grey = cv2.cvtColor(np.ascontiguousarray(arr), cv2.COLOR_RGB2GRAY)
        out = (grey.astype("<u2") * 257).astype("<u2")
    data = out.tobytes()
    return data, len(data) // h


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    """JPEG bytes of an RGB uint8 image (``quality`` 1-100)."""
    arr = _check_rgb(image)
    if not 1 <= int(quality) <= 100:
        raise InvalidRequestError(f"JPEG quality must be in 1..100, got {quality}")
    ok, enc = cv2.imencode(
        ".jpg", np.ascontiguousarray(arr[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    )
    if not ok:  # pragma: no cover - OpenCV fails only on invalid input, checked above
        raise InvalidRequestError("JPEG encoding failed")
    return enc.tobytes()


def encode_png(image: np.ndarray) -> bytes:
    """Lossless PNG bytes of an RGB uint8 image."""
    arr = _check_rgb(image)
    ok, enc = cv2.imencode(".png", np.ascontiguousarray(arr[:, :, ::-1]))
    if not ok:  # pragma: no cover
        raise InvalidRequestError("PNG encoding failed")
    return enc.tobytes()

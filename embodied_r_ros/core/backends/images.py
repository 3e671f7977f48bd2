"""How key-frame images reach the vision-language model (docs/method.md §3).

Images travel through the package as RGB uint8 numpy arrays of shape (H, W, 3). Before a
perception call each image is, in this order:

1. shrunk so its longer side is at most `max_side` pixels (OpenCV area filter), only when
   `max_side` > 0. 0 keeps the decoded resolution, as the reference does; the VLM
   processor's own pixel budget (Qwen2.5-VL's min/max pixels) still applies afterwards;
2. encoded by OpenCV (`cv2.imencode` on the BGR image): JPEG at `jpeg_quality` (default
   95, OpenCV's own default, so the bytes equal the reference's `cv2.imencode(".jpg",
   frame)` of the same frame) or lossless PNG;
3. either sent as a base64 data URL (OpenAI-compatible servers), or, for the in-process
   backends, decoded again with Pillow into the image the processor gets. Servers
   (vLLM, `transformers serve`) and the reference's in-process path (ms-swift) decode
   the data URL with Pillow too, so every backend sees the same pixels for the same frame.
   PNG is lossless, so its round trip is skipped.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from embodied_r_ros.core.errors import ConfigError, InvalidRequestError

__all__ = [
    "DEFAULT_IMAGE_FORMAT",
    "DEFAULT_JPEG_QUALITY",
    "IMAGE_FORMATS",
    "ImageEncoding",
    "check_rgb",
    "scaled_size",
    "resize_for_model",
    "encode_image",
    "to_data_url",
    "decode_image_bytes",
    "model_images",
    "from_data_url",
]

IMAGE_FORMATS = ("jpeg", "png")
DEFAULT_IMAGE_FORMAT = "jpeg"
DEFAULT_JPEG_QUALITY = 95  # OpenCV's default IMWRITE_JPEG_QUALITY, used by the reference
_MIME = {"jpeg": "image/jpeg", "png": "image/png"}


@dataclass(frozen=True)
class ImageEncoding:
    """The image settings of one perception model (see the module docstring).

    Attributes:
        fmt: "jpeg" (the reference's choice) or "png" (lossless).
        jpeg_quality: 1..100; ignored for PNG.
        max_side: longest image side in pixels; 0 = the decoded resolution.
    """

    fmt: str = DEFAULT_IMAGE_FORMAT
    jpeg_quality: int = DEFAULT_JPEG_QUALITY
    max_side: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in IMAGE_FORMATS:
            raise ConfigError(f"image_format: must be one of {', '.join(IMAGE_FORMATS)}, got {self.fmt!r}")
        quality = self.jpeg_quality
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise ConfigError(f"jpeg_quality: must be an integer in 1..100, got {quality!r}")
        side = self.max_side
        if isinstance(side, bool) or not isinstance(side, int) or side < 0:
            raise ConfigError(f"max_image_side: must be an integer >= 0 (0 = full resolution), got {side!r}")

    @property
    def mime(self) -> str:
        return _MIME[self.fmt]


def check_rgb(image: np.ndarray) -> np.ndarray:
    """Return `image` as a C-contiguous RGB uint8 array, or raise InvalidRequestError."""
    if not isinstance(image, np.ndarray):
        raise InvalidRequestError(f"image must be a numpy array, got {type(image).__name__}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise InvalidRequestError(f"image must have shape (H, W, 3), got {image.shape}")
    if image.dtype != np.uint8:
        raise InvalidRequestError(f"image must be uint8, got {image.dtype}")
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise InvalidRequestError(f"image is empty: {image.shape}")
    return np.ascontiguousarray(image)


def scaled_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) shrunk so the longer side is at most `max_side`; 0 = unchanged."""
    longest = max(width, height)
    if max_side <= 0 or longest <= max_side:
        return width, height
    scale = max_side / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


def resize_for_model(image: np.ndarray, max_side: int = 0) -> np.ndarray:
    """RGB image shrunk (area filter, aspect kept) to `max_side`; unchanged when it fits."""
    rgb = check_rgb(image)
    height, width = rgb.shape[:2]
    size = scaled_size(width, height, max_side)
    if size == (width, height):
        return rgb
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)


def encode_image(image: np.ndarray, encoding: ImageEncoding | None = None) -> bytes:
    """The bytes sent to the VLM: OpenCV's JPEG (or PNG) of the BGR image after resizing."""
    encoding = encoding or ImageEncoding()
    bgr = np.ascontiguousarray(resize_for_model(image, encoding.max_side)[:, :, ::-1])
    if encoding.fmt == "jpeg":
        ok, buffer = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, encoding.jpeg_quality])
    else:
        ok, buffer = cv2.imencode(".png", bgr)
    if not ok:  # pragma: no cover - OpenCV fails only on input check_rgb rejects
        raise InvalidRequestError(f"{encoding.fmt} encoding of a {image.shape} image failed")
    return buffer.tobytes()


def to_data_url(image: np.ndarray, encoding: ImageEncoding | None = None) -> str:
    """`data:image/jpeg;base64,...` (or png) URL for an OpenAI `image_url` content part."""
    encoding = encoding or ImageEncoding()
    payload = base64.b64encode(encode_image(image, encoding)).decode("ascii")
    return f"data:{encoding.mime};base64,{payload}"


def decode_image_bytes(data: bytes) -> Image.Image:
    """Encoded image bytes -> Pillow RGB image (how servers read a data URL)."""
    try:
        with Image.open(io.BytesIO(data)) as pil:
            return pil.convert("RGB")
    except Exception as exc:  # noqa: BLE001 - any decoder failure is bad input
        raise InvalidRequestError(f"could not decode image bytes ({len(data)} bytes): {exc}") from exc


def model_images(images: Sequence[np.ndarray], encoding: ImageEncoding | None = None) -> list[Image.Image]:
    """The Pillow images an in-process backend hands its processor, in order.

    JPEG: encoded exactly as for a server, then decoded with Pillow, so in-process and
    HTTP backends see identical pixels. PNG: the resized image itself (lossless).
    """
    encoding = encoding or ImageEncoding()
    if encoding.fmt == "png":
        return [Image.fromarray(resize_for_model(img, encoding.max_side)) for img in images]
    return [decode_image_bytes(encode_image(img, encoding)) for img in images]


def from_data_url(url: str) -> np.ndarray:
    """Decode a base64 image data URL back into an RGB uint8 array (tests, servers)."""
    if not url.startswith("data:") or ";base64," not in url:
        raise InvalidRequestError("not a base64 data URL")
    payload = base64.b64decode(url.split(";base64,", 1)[1])
    return np.asarray(decode_image_bytes(payload))

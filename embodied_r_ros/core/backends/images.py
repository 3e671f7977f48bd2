"""Image helpers shared by the backends: validation, downscaling, PIL and data URLs.

Images travel through the package as RGB uint8 numpy arrays of shape (H, W, 3).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import numpy as np
from PIL import Image

from embodied_r_ros.core.errors import InvalidRequestError


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


def to_pil(image: np.ndarray, max_side: int = 0) -> Image.Image:
    """RGB uint8 array -> PIL RGB image, downscaled (area filter) to `max_side`."""
    pil = Image.fromarray(check_rgb(image))
    size = scaled_size(pil.width, pil.height, max_side)
    if size != pil.size:
        pil = pil.resize(size, Image.Resampling.BOX)
    return pil


def to_pil_list(images: Sequence[np.ndarray], max_side: int = 0) -> list[Image.Image]:
    """`to_pil` over a sequence."""
    return [to_pil(img, max_side) for img in images]


def encode_image(image: np.ndarray, max_side: int = 0, fmt: str = "PNG", quality: int = 90) -> bytes:
    """Encode as PNG (lossless, default) or JPEG bytes after optional downscaling."""
    fmt = fmt.upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in ("PNG", "JPEG"):
        raise ValueError(f"unsupported image format {fmt!r}: use PNG or JPEG")
    buffer = io.BytesIO()
    pil = to_pil(image, max_side)
    if fmt == "JPEG":
        pil.save(buffer, format="JPEG", quality=quality)
    else:
        pil.save(buffer, format="PNG")
    return buffer.getvalue()


def to_data_url(image: np.ndarray, max_side: int = 0, fmt: str = "PNG", quality: int = 90) -> str:
    """`data:image/png;base64,...` (or jpeg) URL for an OpenAI `image_url` content part."""
    payload = encode_image(image, max_side, fmt, quality)
    mime = "image/jpeg" if fmt.upper() in ("JPEG", "JPG") else "image/png"
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def from_data_url(url: str) -> np.ndarray:
    """Decode a base64 image data URL back into an RGB uint8 array (tests, servers)."""
    if not url.startswith("data:") or ";base64," not in url:
        raise InvalidRequestError("not a base64 data URL")
    payload = base64.b64decode(url.split(";base64,", 1)[1])
    with Image.open(io.BytesIO(payload)) as pil:
        return np.asarray(pil.convert("RGB"))

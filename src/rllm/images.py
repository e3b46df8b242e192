"""Images in chat messages: one in-memory form, and stored once per run by content hash.

The one form in memory (what an agent's messages, `Step.chat_completions` and an OpenAI-compatible server see) is
OpenAI's content parts: a message's `content` is a str, or a list of `{"type": "text", "text": ...}` and
`{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}` parts. `image_part` builds the image part
from what an environment or a user has at hand (a PIL image, PNG/JPEG bytes, a file path or `file://` URL, a data
URL), and `normalize_images` turns every image of a message list into that form, HF-style
`{"type": "image", "image": ...}` parts included, so the rest of rllm (rendering, clients, the run log, the viewer)
handles one shape only.

On disk, a base64 image repeated in every later turn's prompt would grow an episode quadratically with its length:
`store_images` replaces each data URL by a reference `rllm-image:<sha256>.<ext>` and writes the bytes once per run
(`<run>/images/<sha256>.<ext>`); `load_images` puts the exact same data URL back.

Choices:
- Bytes and files keep their own encoding when it is PNG, JPEG, WebP or GIF (recognised by their magic bytes, not
  their file name): re-encoding a JPEG would change the pixels the model sees. Anything else PIL can read is
  re-encoded as PNG (lossless). PIL images are encoded as PNG.
- A data URL of one of those four types is kept as given, without decoding it: `normalize_images` runs on every
  model call, so an image already in the canonical form must cost nothing.
- http(s) URLs are left as they are: a server may fetch them; rllm downloads nothing.
- Pillow is imported inside the functions that need it, so `import rllm` stays light.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from rllm.errors import ImageError
from rllm.fsutil import write_bytes_atomically

__all__ = [
    "IMAGE_FILE",
    "IMAGE_REF_PREFIX",
    "VLM_NEEDED",
    "decode_image",
    "encode_pil_images",
    "has_images",
    "image_part",
    "is_image",
    "load_images",
    "message_image_urls",
    "message_images",
    "normalize_images",
    "replace_image_refs",
    "store_images",
]

IMAGE_REF_PREFIX = "rllm-image:"
# The phrase every refusal of an image by a text-only model ends with (local rendering, the gateway).
VLM_NEEDED = "images need a vision-language model"

_KEPT_FORMATS = ("png", "jpeg", "webp", "gif")
_CANONICAL_PREFIXES = tuple(f"data:image/{kind};base64," for kind in _KEPT_FORMATS)
_REMOTE_PREFIXES = ("http://", "https://")
_DATA_URL = re.compile(r"data:image/(png|jpeg|webp|gif);base64,([A-Za-z0-9+/]*={0,2})")
IMAGE_FILE = re.compile(r"[0-9a-f]{64}\.(png|jpeg|webp|gif)")  # the name of a stored image: nothing else is served
_PNG_MODES = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})
_HF_IMAGE_KEYS = ("image", "url", "path")  # where transformers' `{"type": "image", ...}` parts hold the image


# ---- one image -> its part ---------------------------------------------------------------------------------------


def image_part(image: Any) -> dict[str, Any]:
    """The canonical `image_url` part of `image`: a PIL image, raw image bytes, a local path (str or Path), a
    `file://` URL, a data URL, or an http(s) URL (kept as it is). An unreadable file raises `ImageError` naming it."""
    return {"type": "image_url", "image_url": {"url": _image_url(image)}}


def is_image(value: Any) -> bool:
    """Whether `value` is a PIL image. Without importing PIL: if PIL was never imported, nothing is one."""
    pil = sys.modules.get("PIL.Image")
    return pil is not None and isinstance(value, pil.Image)


def encode_pil_images(value: Any) -> Any:
    """`value` with every PIL image in it (itself, or inside dicts and lists) replaced by its `image_url` part, so
    an environment's image observation can be recorded in a JSON episode. The same object comes back when nothing
    changes, at no cost when PIL was never imported (then no value can hold a PIL image)."""
    if "PIL.Image" not in sys.modules:
        return value
    if is_image(value):
        return image_part(value)
    if isinstance(value, dict):
        new = {key: encode_pil_images(item) for key, item in value.items()}
        return value if all(new[key] is item for key, item in value.items()) else new
    if isinstance(value, list):
        items = [encode_pil_images(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _image_url(image: Any) -> str:
    if is_image(image):
        return _data_url(_encode_png(image), "png")
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _bytes_url(bytes(image), "the image bytes")
    if isinstance(image, Path):
        return _file_url(image)
    if isinstance(image, str):
        if image.startswith(_CANONICAL_PREFIXES + _REMOTE_PREFIXES):
            return image
        if image.startswith("data:"):
            return _bytes_url(_data_url_bytes(image), f"the data URL {image[:40]}...")
        if image.startswith("file://"):
            return _file_url(Path(unquote(urlsplit(image).path)))
        return _file_url(Path(image))
    raise ImageError(
        f"cannot make an image of a {type(image).__name__}; give a PIL image, image bytes, a file path "
        "or a data/file/http URL"
    )


def _file_url(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(
            f"cannot read the image file {path}: {exc.strerror or exc}; check the path the environment "
            "or the messages give"
        ) from None
    return _bytes_url(data, f"the file {path}")


def _bytes_url(data: bytes, what: str) -> str:
    kind = _sniff(data)
    if kind is not None:
        return _data_url(data, kind)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            return _data_url(_encode_png(opened), "png")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageError(f"{what} is not an image PIL can read ({exc}); give a PNG, JPEG, WebP or GIF") from None


def _sniff(data: bytes) -> str | None:
    """The format of image bytes by their magic number, for the formats kept as they are; None for any other."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return None


def _encode_png(image: Any) -> bytes:
    if image.mode not in _PNG_MODES:  # CMYK, YCbCr, float...: PNG cannot hold them as they are
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _data_url(data: bytes, kind: str) -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _data_url_bytes(url: str) -> bytes:
    header, _, payload = url.partition(",")
    try:
        if header.endswith(";base64"):
            return base64.b64decode(payload, validate=True)
        return unquote(payload).encode("latin-1")
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise ImageError(f"the data URL {url[:40]}... does not decode ({exc})") from None


# ---- messages ----------------------------------------------------------------------------------------------------


def normalize_images(messages: list[dict[str, Any]], *, in_place: bool = False) -> list[dict[str, Any]]:
    """`messages` with every image of a content list as a canonical `image_url` part (module docstring); str
    contents and other parts untouched. Without anything to change the same list comes back (nothing is copied).
    `in_place=True` replaces the `content` of the changed message dicts themselves, so every holder of them (an
    agent's history, the steps that recorded it) sees the canonical form, and each image is encoded once."""
    out = messages
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if type(content) is not list:
            continue
        parts = _canonical_parts(content)
        if parts is content:
            continue
        if in_place:
            message["content"] = parts
            continue
        if out is messages:
            out = list(messages)
        out[index] = {**message, "content": parts}
    return out


def _canonical_parts(parts: list[Any]) -> list[Any]:
    """The parts with each image part canonical; `parts` itself when all are already."""
    new = [_canonical_part(part) for part in parts]
    return parts if all(a is b for a, b in zip(new, parts, strict=True)) else new


def _canonical_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "image_url":
        value = part.get("image_url")
        url = value.get("url") if isinstance(value, dict) else value
        if isinstance(url, str) and url.startswith(_CANONICAL_PREFIXES + _REMOTE_PREFIXES) and isinstance(value, dict):
            return part
        extra = {k: v for k, v in value.items() if k != "url"} if isinstance(value, dict) else {}
        return {**part, "image_url": {**extra, "url": _image_url(url)}}  # `detail` and the like are kept
    if kind == "image":
        source = next((part[key] for key in _HF_IMAGE_KEYS if part.get(key) is not None), None)
        if source is None:
            raise ImageError(f"an image part without an image: {sorted(part)}; give 'image', 'url' or 'path'")
        return image_part(source)
    return part


def has_images(messages: list[dict[str, Any]]) -> bool:
    """Whether any message holds an image part (in any of the forms `normalize_images` accepts)."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if type(content) is list and any(
            isinstance(p, dict) and p.get("type") in ("image_url", "image") for p in content
        ):
            return True
    return False


def message_images(messages: list[dict[str, Any]]) -> list[Any]:
    """The images of `messages` as PIL images, in order (what a vision-language model's processor takes). An http(s)
    image cannot be decoded here (rllm downloads nothing): `ImageError`."""
    return [decode_image(url) for url in message_image_urls(messages)]


def message_image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """The URLs of `messages`' images (canonical: data URLs, or http(s) as given), in the order they appear."""
    urls = []
    for message in normalize_images(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if type(content) is list else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                urls.append(part["image_url"]["url"])
    return urls


def decode_image(url: str) -> Any:
    """The PIL image of a data URL (loaded, so the bytes are decoded now). An http(s) URL: `ImageError` (rllm
    downloads nothing)."""
    from PIL import Image, UnidentifiedImageError

    if url.startswith(_REMOTE_PREFIXES):
        raise ImageError(
            f"the image {url} is remote; rllm does not download images: give a data URL, a file or a PIL image"
        )
    try:
        image = Image.open(io.BytesIO(_data_url_bytes(url)))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageError(f"the data URL {url[:40]}... is not an image PIL can read ({exc})") from None
    return image


# ---- storage: data URLs <-> references to files ------------------------------------------------------------------


def store_images(obj: Any, images_dir: str | os.PathLike) -> Any:
    """A copy of the JSON-like `obj` (dicts, lists) with every data URL string of a PNG/JPEG/WebP/GIF image replaced
    by `rllm-image:<sha256>.<ext>`, its bytes written to `images_dir/<sha256>.<ext>` once (an existing file is kept:
    the name is its content's hash) and atomically (a kill never leaves a torn image under that name). A data URL
    whose base64 is not the canonical encoding of its bytes stays inline: the round trip must give the same string."""
    folder = Path(images_dir)

    def store(text: str) -> str:
        match = _DATA_URL.fullmatch(text) if text.startswith("data:image/") else None
        if match is None:
            return text
        kind, payload = match.groups()
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:  # bad padding: not ours to fix, kept inline
            return text
        if base64.b64encode(data).decode("ascii") != payload:
            return text
        name = f"{hashlib.sha256(data).hexdigest()}.{kind}"
        path = folder / name
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            write_bytes_atomically(path, data)
        return IMAGE_REF_PREFIX + name

    return _map_strings(obj, store)


def load_images(obj: Any, images_dir: str | os.PathLike) -> Any:
    """A copy of `obj` with every `rllm-image:` reference replaced by the data URL `store_images` took it from; a
    missing file raises `ImageError` naming it."""
    folder = Path(images_dir)

    def load(name: str) -> str:
        try:
            data = (folder / name).read_bytes()
        except OSError as exc:
            raise ImageError(
                f"the episode refers to the image {folder / name}, which cannot be read "
                f"({exc.strerror or exc}); the run's images/ folder must stay beside its "
                "episodes.jsonl"
            ) from None
        return _data_url(data, name.rsplit(".", 1)[1])

    return replace_image_refs(obj, load)


def replace_image_refs(obj: Any, url_of: Any) -> Any:
    """A copy of `obj` with every `rllm-image:<name>` reference replaced by `url_of(name)` (the viewer links them)."""

    def replace(text: str) -> str:
        if not text.startswith(IMAGE_REF_PREFIX) or not IMAGE_FILE.fullmatch(name := text[len(IMAGE_REF_PREFIX) :]):
            return text
        return url_of(name)

    return _map_strings(obj, replace)


def _map_strings(obj: Any, fn: Any) -> Any:
    """A deep copy of dicts and lists with `fn` applied to every str value (keys are left as they are)."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: _map_strings(value, fn) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_map_strings(value, fn) for value in obj]
    return obj

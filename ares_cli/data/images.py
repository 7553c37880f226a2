"""Images of problem records: resolving them to files, hashing their bytes, and checking they decode.

A record's ``images`` is a list of paths. Sources may give paths relative to the dataset file (resolved
against its directory), absolute paths, or, in an HF image column, decoded ``PIL.Image`` objects, raw
bytes or ``{"bytes", "path"}`` dicts; those are written once, content-addressed, under the image cache
(``$ARES_IMAGE_CACHE``, default ``~/.cache/ares/images``) so every record refers to images by path.

Stage input hashes see an image's sha256, never its path (:func:`hashable_records`): replacing an
image's bytes changes the key; moving the dataset does not.

Every image is checked when a dataset loads, from its header only (nothing is decoded): it must exist,
be non-empty, have at most :data:`MAX_IMAGE_PIXELS` pixels (a decompression bomb is refused before a byte
of it is decoded) and an aspect ratio of at most :data:`MAX_ASPECT_RATIO`, the Qwen2.5-VL processor's
limit. ``data check`` then decodes each one.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.store.hashing import sha256_file

FIELD = "images"
MAX_IMAGE_PIXELS = 89_478_485  # PIL's decompression-bomb threshold (about 9459 x 9459)
MAX_ASPECT_RATIO = 200  # Qwen2.5-VL's processor refuses longer / shorter sides above this


def image_cache_dir() -> Path:
    """Where images that arrive as bytes or PIL objects are written (content-addressed)."""
    return Path(os.environ.get("ARES_IMAGE_CACHE") or Path.home() / ".cache" / "ares" / "images")


def _store_bytes(data: bytes) -> str:
    """Write image bytes (a parquet or hub image column's) to the cache once their header passes the same
    checks as an image file's (:func:`size_problem`): nothing is decoded, a bomb is a ValueError."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, as an error
            with Image.open(io.BytesIO(data)) as img:
                fmt, size = (img.format or "img").lower(), img.size
    except Image.DecompressionBombError as exc:
        raise ValueError(f"image bytes are too large to decode safely ({exc})") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"image bytes are not a readable image ({exc})") from None
    problem = size_problem(*size)
    if problem:
        raise ValueError(f"image bytes refused from their header: {problem}")
    digest = hashlib.sha256(data).hexdigest()
    path = image_cache_dir() / f"{digest}.{fmt}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return str(path)


def _one_image(value: Any, base_dir: Path | None) -> str:
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        data, path = value.get("bytes"), value.get("path")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"an image's 'bytes' must be raw bytes, got {type(data).__name__} (not decoded)")
        if data is None and path is not None and not isinstance(path, str):
            raise ValueError(f"an image's 'path' must be a string, got {type(path).__name__}")
        value = data or path
    if isinstance(value, (bytes, bytearray)):
        return _store_bytes(bytes(value))
    if hasattr(value, "save") and hasattr(value, "size"):  # a PIL image
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return _store_bytes(buffer.getvalue())
    if isinstance(value, (str, os.PathLike)) and str(value):
        path = Path(value).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return str(path)
    raise ValueError(f"an image must be a path, bytes or a PIL image, got {type(value).__name__}")


def resolve_images(value: Any, base_dir: Path | None) -> list[str]:
    """A record's images as path strings (a single image is a list of one; see the module doc)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [_one_image(item, base_dir) for item in items]


def file_problems(paths: Sequence[str]) -> list[str]:
    """``"<problem>: <path>"`` for each missing, zero-size, unreadable, too large or too elongated image
    (a stat and the header: nothing is decoded)."""
    return [
        f"{problem}: {path}" for path in paths if (problem := _stat_problem(path) or _header_problem(path))
    ]


def _header_problem(path: str) -> str | None:
    """What the image header says is wrong: unreadable, no pixels, too many pixels, too elongated."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # reported below, as an error
            with Image.open(path) as img:
                width, height = img.size
    except Image.DecompressionBombError as exc:
        return f"image is too large to decode safely ({exc})"
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        return f"cannot decode image ({type(exc).__name__}: {exc})"
    return size_problem(width, height)


def size_problem(width: int, height: int) -> str | None:
    """Why a ``width`` x ``height`` image cannot go to the model (see the module doc), or None."""
    if width <= 0 or height <= 0:
        return "zero-size image"
    if width * height > MAX_IMAGE_PIXELS:
        return (
            f"image is {width}x{height} = {width * height:,} pixels, over the {MAX_IMAGE_PIXELS:,}-pixel "
            "limit (a decompression bomb?)"
        )
    ratio = max(width, height) / min(width, height)
    if ratio > MAX_ASPECT_RATIO:
        return f"image is {width}x{height}: aspect ratio {ratio:.0f} is over the processor's limit of {MAX_ASPECT_RATIO}"
    return None


def _stat_problem(path: str) -> str | None:
    p = Path(path)
    if not p.is_file():
        return "image not found"
    if p.stat().st_size == 0:
        return "zero-size image"
    return None


def open_image(path: str | Path):
    """The image at ``path`` decoded as RGB (raises :class:`InputError` naming it when it cannot be, or
    when its size is refused: :func:`size_problem`)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            problem = size_problem(*img.size)
            if problem:
                raise InputError(problem, file=path, field=FIELD)
            img.load()
            return img.convert("RGB")
    except FileNotFoundError:
        raise InputError("image not found", file=path, field=FIELD) from None
    except Image.DecompressionBombError as exc:
        raise InputError(f"image is too large to decode safely ({exc})", file=path, field=FIELD) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"cannot decode image ({exc})", file=path, field=FIELD) from None


def inspect_images(
    records: Sequence[dict], locations: Sequence[tuple[Any, int]]
) -> tuple[dict, list[InputError]]:
    """Open and decode every image: ``(summary, errors)``; the summary has counts and size ranges."""
    from PIL import Image, UnidentifiedImageError

    widths, heights, errors, per_record = [], [], [], []
    for record, (file, row) in zip(records, locations, strict=True):
        paths = record.get(FIELD) or ()
        if paths:
            per_record.append(len(paths))
        for path in paths:
            problem = _stat_problem(path) or _header_problem(path)  # a bomb is never decoded
            if problem is None:
                try:
                    with Image.open(path) as img:
                        img.load()
                        width, height = img.size
                    widths.append(width)
                    heights.append(height)
                except (UnidentifiedImageError, OSError, ValueError) as exc:
                    problem = f"cannot decode image ({type(exc).__name__}: {exc})"
            if problem:
                errors.append(InputError(f"{problem}: {path}", file=file, row=row, field=FIELD))
    summary = {
        "records_with_images": len(per_record),
        "images": sum(per_record),
        "per_record": {"min": min(per_record, default=0), "max": max(per_record, default=0)},
        "width": {"min": min(widths, default=0), "max": max(widths, default=0)},
        "height": {"min": min(heights, default=0), "max": max(heights, default=0)},
    }
    return summary, errors


def hashable_records(records: Sequence[dict]) -> list[dict]:
    """Records with each image path replaced by ``{"sha256": <bytes hash>}`` (for stage input hashes).

    Records without images are returned unchanged, so text datasets keep their keys."""
    out = []
    for record in records:
        paths = record.get(FIELD)
        if not paths:
            out.append(record)
            continue
        digests = []
        for path in paths:
            try:
                digests.append({"sha256": sha256_file(path)})
            except OSError:
                raise InputError(f"image not found: {path}", file=path, field=FIELD) from None
        out.append({**record, FIELD: digests})
    return out


def images_input_ref(jsonl: str | Path, *, role: str = "images"):
    """An InputRef over the bytes of every image a JSONL file's rows name (paths relative to the file), or
    None when no row has images; a training stage adds it so replacing an image reruns the stage."""
    from ares_cli.data.jsonl import parse_jsonl
    from ares_cli.store.artifacts import InputRef
    from ares_cli.store.hashing import canonical_json, sha256_text

    rows, _ = parse_jsonl(Path(jsonl))
    digests = []
    for row_no, row in rows:
        if not isinstance(row, dict) or not row.get(FIELD):
            continue
        try:
            paths = resolve_images(row[FIELD], Path(jsonl).parent)
        except ValueError as exc:
            raise InputError(str(exc), file=jsonl, row=row_no, field=FIELD) from None
        for path in paths:
            try:
                digests.append([row_no, sha256_file(path)])
            except OSError:
                raise InputError(f"image not found: {path}", file=jsonl, row=row_no, field=FIELD) from None
    if not digests:
        return None
    return InputRef(role=role, path=str(jsonl), sha256=sha256_text(canonical_json(digests)))

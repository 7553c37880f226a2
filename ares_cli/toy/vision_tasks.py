"""The visual toy world's tasks: chained arithmetic whose start value is only in the image, as a colour.

An image is a solid colour from a 10-colour palette (``PALETTE``); the colour's index is a digit ``x``.
A problem that needs the image reads ``Let x be the colour code of the image. Start at x, then +7, *2.``;
one that does not states its start value and carries an image it does not need (``meta.needs_image``).
A solid colour is what a tiny, randomly initialised vision tower learns to read within a CPU build: every
patch carries the whole signal, so no counting or glyph recognition is needed. Everything is a pure
function of a seed; the PNGs are rendered with Pillow and decoded back by :func:`decode_colour_code`.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from ares_cli.errors import InputError
from ares_cli.toy.tasks import format_problem, parse_problem, random_ops, solve, write_jsonl

# Ten colours far apart in RGB (none near white, which is the blank image).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (0, 0, 0),  # 0 black
    (220, 30, 30),  # 1 red
    (30, 170, 40),  # 2 green
    (30, 60, 220),  # 3 blue
    (240, 220, 30),  # 4 yellow
    (150, 40, 190),  # 5 purple
    (30, 200, 210),  # 6 cyan
    (245, 130, 20),  # 7 orange
    (120, 120, 120),  # 8 grey
    (120, 60, 20),  # 9 brown
)
BLANK = (255, 255, 255)
# Image sizes (width, height): multiples of 28 with at least 56 * 56 pixels, so Qwen2.5-VL's processor keeps
# them as they are (4 or 6 vision tokens after the 2 x 2 merge).
IMAGE_SIZES: tuple[tuple[int, int], ...] = ((56, 56), (84, 56), (56, 84))
COLOUR_JITTER = 12
MAX_VL_DIFFICULTY = 3
NEEDS_IMAGE_EVERY = 4  # in each run of 4 difficulty cycles, the last one does not need the image
VL_SPLIT_SIZES = {"train": 1000, "val": 100, "test": 200}
VL_SPLIT_SEEDS = {"train": 4004, "val": 5005, "test": 6006}
VL_DATA_DIR = Path(__file__).parent / "vl_data"
IMAGE_STATEMENT = "Let x be the colour code of the image."


def render_colour(code: int, size: tuple[int, int], rng: random.Random) -> bytes:
    """PNG bytes of a ``size`` image filled with palette colour ``code`` (each channel jittered)."""
    from PIL import Image

    if not 0 <= code < len(PALETTE):
        raise InputError(f"colour code must be in 0..{len(PALETTE) - 1}, got {code}")
    colour = tuple(
        min(255, max(0, channel + rng.randint(-COLOUR_JITTER, COLOUR_JITTER))) for channel in PALETTE[code]
    )
    return _png(Image.new("RGB", size, colour))


def render_blank(size: tuple[int, int]) -> bytes:
    """PNG bytes of a white image of ``size``: the same shape as a real one, with no information."""
    from PIL import Image

    return _png(Image.new("RGB", size, BLANK))


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def decode_colour_code(png: bytes) -> int:
    """The palette index nearest to the mean colour of a PNG (inverse of :func:`render_colour`)."""
    from PIL import Image, ImageStat

    with Image.open(io.BytesIO(png)) as image:
        mean = ImageStat.Stat(image.convert("RGB")).mean
    distances = [sum((m - c) ** 2 for m, c in zip(mean, colour, strict=True)) for colour in PALETTE]
    return distances.index(min(distances))


def format_vl_problem(start: int | None, steps: list[tuple[str, int]]) -> str:
    """The problem text: with ``start=None`` the chain starts at ``x``, the colour code of the image."""
    if start is None:
        ops = ", ".join(f"{op}{operand}" for op, operand in steps)
        return f"{IMAGE_STATEMENT} Start at x, then {ops}."
    return format_problem(start, steps)


def substitute_x(problem: str, x: int) -> str:
    """The plain chain (``Start at <x>, ...``) of a problem, given the colour code ``x`` it reads."""
    if problem.startswith(IMAGE_STATEMENT):
        return problem[len(IMAGE_STATEMENT) :].strip().replace("Start at x,", f"Start at {x},", 1)
    return problem


def solve_vl(problem: str, x: int) -> int:
    """The exact answer of a visual toy problem whose image shows colour code ``x``."""
    return solve(*parse_problem(substitute_x(problem, x)))


def random_vl_problem(rng: random.Random, difficulty: int, needs_image: bool) -> tuple[int, str]:
    """A colour code and a problem of ``difficulty`` steps (starting at ``x`` when ``needs_image``)."""
    code = rng.randrange(len(PALETTE))
    start = code if needs_image else rng.randint(10, 99)
    steps = random_ops(rng, start, difficulty)
    return code, format_vl_problem(None if needs_image else start, steps)


def generate_vl_split(
    split: str, size: int, seed: int, *, exclude: set | None = None, distinct: bool = True
) -> list[tuple[dict, bytes]]:
    """``size`` records with their PNG bytes: difficulty ``1 + i % 3``, three quarters needing the image.

    No record's (problem, colour code) is in ``exclude``; with ``distinct`` none repeats within the split
    (the training split allows repeats: one-step problems starting at ``x`` number only about 250).
    Returns ``[(record, png_bytes), ...]``; ``images`` holds each PNG's path relative to the split file.
    """
    rng = random.Random(seed)
    seen = set(exclude or ())
    rows = []
    for index in range(size):
        difficulty = 1 + index % MAX_VL_DIFFICULTY
        needs_image = (index // MAX_VL_DIFFICULTY) % NEEDS_IMAGE_EVERY != NEEDS_IMAGE_EVERY - 1
        while True:
            code, problem = random_vl_problem(rng, difficulty, needs_image)
            if (problem, code) not in seen:
                break
        if distinct:
            seen.add((problem, code))
        size_wh = rng.choice(IMAGE_SIZES)
        png = render_colour(code, size_wh, rng)
        record_id = f"toy-vl-{split}-{index:06d}"
        record = {
            "id": record_id,
            "source": "toy-vl",
            "problem": problem,
            "answer": str(solve_vl(problem, code)),
            "images": [f"images/{split}/{record_id}.png"],
            "meta": {"difficulty": difficulty, "needs_image": needs_image},
        }
        rows.append((record, png))
    return rows


def generate_all_vl_splits() -> dict[str, list[tuple[dict, bytes]]]:
    """The shipped splits (test, val, then train), pairwise disjoint by (problem, colour code)."""
    splits = {}
    taken: set = set()
    for name in ("test", "val", "train"):
        splits[name] = generate_vl_split(
            name, VL_SPLIT_SIZES[name], VL_SPLIT_SEEDS[name], exclude=taken, distinct=name != "train"
        )
        taken.update((record["problem"], decode_colour_code(png)) for record, png in splits[name])
    return {name: splits[name] for name in ("train", "val", "test")}


def held_out_keys() -> set[tuple[str, int]]:
    """(problem, colour code) of every shipped record: the base build trains on none of them."""
    return {
        (record["problem"], decode_colour_code(png))
        for rows in generate_all_vl_splits().values()
        for record, png in rows
    }


def write_vl_split(rows: list[tuple[dict, bytes]], path: Path) -> None:
    """Write a split's JSONL at ``path`` and its PNGs beside it (at each record's relative path)."""
    for record, png in rows:
        image_path = path.parent / record["images"][0]
        image_path.parent.mkdir(parents=True, exist_ok=True)
        image_path.write_bytes(png)
    write_jsonl([record for record, _ in rows], path)


def blank_variant(rows: list[tuple[dict, bytes]], split: str) -> list[tuple[dict, bytes]]:
    """The same records with every image replaced by a blank one of the same size (``split`` names it)."""
    from PIL import Image

    blanked = []
    for record, png in rows:
        with Image.open(io.BytesIO(png)) as image:
            size = image.size
        record_id = record["id"]
        new = {**record, "images": [f"images/{split}/{record_id}.png"]}
        blanked.append((new, render_blank(size)))
    return blanked


def regenerate_vl_splits(out_dir: str | Path = VL_DATA_DIR) -> dict[str, Path]:
    """Write ``{train,val,test,test-blank}.jsonl`` and their images into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    paths = {}
    splits = generate_all_vl_splits()
    splits["test-blank"] = blank_variant(splits["test"], "test-blank")
    for name, rows in splits.items():
        paths[name] = out_dir / f"{name}.jsonl"
        write_vl_split(rows, paths[name])
    return paths


def vl_split_path(split: str) -> Path:
    """Path of a shipped visual split file (``train``, ``val``, ``test`` or ``test-blank``)."""
    names = (*VL_SPLIT_SIZES, "test-blank")
    if split not in names:
        raise InputError(f"unknown visual toy split {split!r}; expected one of {list(names)}")
    return VL_DATA_DIR / f"{split}.jsonl"


def load_vl_split(split: str) -> list[dict]:
    """Records of a shipped visual split (image paths relative to the split file)."""
    path = vl_split_path(split)
    if not path.exists():
        raise InputError(
            "visual toy split missing; run ares_cli.toy.vision_tasks.regenerate_vl_splits()", file=path
        )
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]

"""Qwen2.5-VL constants: its processor's image resize bounds (the defaults of every stage's pixel fields)
and its vision special tokens."""

MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
MIN_PIXELS_HELP = "Images with fewer pixels are upscaled (Qwen2.5-VL: 4*28*28)."
MAX_PIXELS_HELP = "Images with more pixels are downscaled (Qwen2.5-VL: 16384*28*28); at least min_pixels."


def check_pixel_bounds(min_pixels: int, max_pixels: int, prefix: str = "") -> None:
    """The processor's resize bounds must be ordered (each field's own range is >= 1): a UsageError."""
    from ares_cli.errors import UsageError

    if min_pixels > max_pixels:
        raise UsageError(
            f"config key '{prefix}min_pixels' {min_pixels} is above '{prefix}max_pixels' {max_pixels}: the "
            "processor cannot resize an image into an empty range"
        )

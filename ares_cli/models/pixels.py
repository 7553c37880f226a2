"""Qwen2.5-VL constants: its processor's image resize bounds (the defaults of every stage's pixel fields)
and its vision special tokens."""

MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

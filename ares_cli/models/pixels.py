"""Qwen2.5-VL's image resize bounds (its processor defaults), the defaults of every stage's pixel fields."""

MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28

"""An image-only Qwen2.5-VL processor: the stock one minus its video processor.

transformers' ``Qwen2_5_VLProcessor`` requires a video processor, which needs torchvision; images alone
need only the PIL image processor. This subclass keeps the stock image path (placeholder expansion,
``mm_token_type_ids``, chat template) and drops video. Import it lazily (it imports transformers).
"""

from __future__ import annotations

from transformers import ProcessorMixin
from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

IMAGE_TOKEN, VIDEO_TOKEN = "<|image_pad|>", "<|video_pad|>"


class ImageOnlyProcessor(Qwen2_5_VLProcessor):
    """``Qwen2_5_VLProcessor`` with an image processor and a tokenizer only."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or IMAGE_TOKEN
        self.video_token = getattr(tokenizer, "video_token", None) or VIDEO_TOKEN
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

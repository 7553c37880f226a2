"""Prompt rendering: optional user-message template, optional system prompt, then the chat template."""

from __future__ import annotations

from typing import Any

from ares_cli.errors import UsageError


def render_prompt(
    tokenizer: Any,
    problem: str,
    *,
    system_prompt: str | None = None,
    template: str | None = None,
    n_images: int = 0,
) -> str:
    """Render `problem` as the text a model sees.

    `template` is a Python format string with a `{problem}` field, applied to the user message (write
    literal braces doubled, e.g. `\\boxed{{}}`). The messages then go through the chat template of
    `tokenizer` (a tokenizer or a processor) with `add_generation_prompt=True`. With `n_images` the user
    message is `n_images` image parts followed by the text, so the template writes one image
    placeholder per image, in order.
    """
    user = problem
    if template is not None:
        if "{problem}" not in template:
            raise UsageError(f"prompt template must contain '{{problem}}': {template!r}")
        try:
            user = template.format(problem=problem)
        except (KeyError, IndexError, ValueError) as e:
            raise UsageError(
                f"prompt template is not a valid format string ({e!r}); write literal braces as '{{{{' and '}}}}'"
            ) from e
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise UsageError(f"tokenizer {name!r} has no chat template; prompts must go through a chat template")
    content: Any = user
    if n_images:
        content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": user}]
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt is not None else []) + [
        {"role": "user", "content": content}
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

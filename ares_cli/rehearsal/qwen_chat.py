"""Qwen2.5's published chat templates and special tokens, written out once (the twins' tokenizer facts).

Sources (each a public file of the model repository on the Hugging Face hub):

- Special tokens 151643-151664 and their ``special`` flags: ``tokenizer_config.json`` ``added_tokens_decoder``
  of Qwen/Qwen2.5-7B-Instruct (the same 22 tokens in every Qwen2.5 text, Math and VL repository);
  ``<tool_call>`` ... ``<|file_sep|>`` (151657-151664) are added with ``"special": false``.
- The Instruct template (default system "You are Qwen, created by Alibaba Cloud. You are a helpful
  assistant."): ``chat_template`` of Qwen/Qwen2.5-7B-Instruct/tokenizer_config.json; the base models
  (Qwen/Qwen2.5-0.5B) ship the same template.
- The Math template: the same template with the default system "Please reason step by step, and put your
  final answer within \\boxed{}." (Qwen/Qwen2.5-Math-1.5B/tokenizer_config.json).
- The VL template: ``chat_template`` of Qwen/Qwen2.5-VL-7B-Instruct/chat_template.json (also in its
  tokenizer_config.json; Qwen2.5-VL-3B-Instruct ships the same).
"""

from __future__ import annotations

# id -> (content, special), as in added_tokens_decoder of Qwen/Qwen2.5-7B-Instruct/tokenizer_config.json.
ADDED_TOKENS: dict[int, tuple[str, bool]] = {
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True),
    151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True),
    151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True),
    151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False),
    151658: ("</tool_call>", False),
    151659: ("<|fim_prefix|>", False),
    151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False),
    151662: ("<|fim_pad|>", False),
    151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
}
# additional_special_tokens of the same tokenizer_config.json
ADDITIONAL_SPECIAL = (
    "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MATH_SYSTEM = "Please reason step by step, and put your final answer within \\\\boxed{}."


def text_template(default_system: str) -> str:
    """Qwen2.5's text chat template (tools, system, user/assistant/tool turns) with ``default_system``
    (written with Jinja string escapes, as in the published file)."""
    return (
        "{%- if tools %}\n"
        "    {{- '<|im_start|>system\\n' }}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- messages[0]['content'] }}\n"
        "    {%- else %}\n"
        f"        {{{{- '{default_system}' }}}}\n"
        "    {%- endif %}\n"
        '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
        'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
        "    {%- for tool in tools %}\n"
        '        {{- "\\n" }}\n'
        "        {{- tool | tojson }}\n"
        "    {%- endfor %}\n"
        '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and '
        'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
        '\\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
        "{%- else %}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "    {%- else %}\n"
        f"        {{{{- '<|im_start|>system\\n{default_system}<|im_end|>\\n' }}}}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
        "{%- for message in messages %}\n"
        '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
        '(message.role == "assistant" and not message.tool_calls) %}\n'
        "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        '    {%- elif message.role == "assistant" %}\n'
        "        {{- '<|im_start|>' + message.role }}\n"
        "        {%- if message.content %}\n"
        "            {{- '\\n' + message.content }}\n"
        "        {%- endif %}\n"
        "        {%- for tool_call in message.tool_calls %}\n"
        "            {%- if tool_call.function is defined %}\n"
        "                {%- set tool_call = tool_call.function %}\n"
        "            {%- endif %}\n"
        '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
        "            {{- tool_call.name }}\n"
        '            {{- \'", "arguments": \' }}\n'
        "            {{- tool_call.arguments | tojson }}\n"
        "            {{- '}\\n</tool_call>' }}\n"
        "        {%- endfor %}\n"
        "        {{- '<|im_end|>\\n' }}\n"
        '    {%- elif message.role == "tool" %}\n'
        '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
        "            {{- '<|im_start|>user' }}\n"
        "        {%- endif %}\n"
        "        {{- '\\n<tool_response>\\n' }}\n"
        "        {{- message.content }}\n"
        "        {{- '\\n</tool_response>' }}\n"
        '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
        "            {{- '<|im_end|>\\n' }}\n"
        "        {%- endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "{%- endif %}\n"
    )


VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = "
    "video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# eos / pad / template per tokenizer flavour, as each model's tokenizer_config.json sets them:
# base (Qwen/Qwen2.5-0.5B) and Math (Qwen/Qwen2.5-Math-1.5B) end text with <|endoftext|>; Instruct
# (Qwen/Qwen2.5-7B-Instruct) and VL (Qwen/Qwen2.5-VL-7B-Instruct) with <|im_end|>; all pad with
# <|endoftext|>, have no BOS token and model_max_length 131072.
FLAVOURS: dict[str, dict[str, str]] = {
    "base": {"eos": "<|endoftext|>", "template": "qwen"},
    "instruct": {"eos": "<|im_end|>", "template": "qwen"},
    "math": {"eos": "<|endoftext|>", "template": "math"},
    "vl": {"eos": "<|im_end|>", "template": "vl"},
}
PAD_TOKEN = "<|endoftext|>"
MODEL_MAX_LENGTH = 131072


def chat_template(flavour: str) -> str:
    """The published chat template of a tokenizer flavour (one of :data:`FLAVOURS`)."""
    kind = FLAVOURS[flavour]["template"]
    if kind == "vl":
        return VL_TEMPLATE
    return text_template(MATH_SYSTEM if kind == "math" else QWEN_SYSTEM)

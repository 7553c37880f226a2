"""The papers' evaluation instructions, set by their suites: ARES's system message (its own evaluation
code) demands the final answer in \\boxed{}; PAEC's suite appends VeRL's math instruction to each problem."""

from __future__ import annotations

import pytest

from ares_cli.commands.eval import resolve_config
from ares_cli.generation.prompts import render_prompt
from ares_cli.stages.suite import load_suite

ARES_SYSTEM = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}."
)


@pytest.mark.parametrize("name", ["ares-mm", "ares-text"])
def test_ares_suites_send_the_papers_system_message(name):
    cfg = resolve_config(config=None, set_=None, flags={}, base=load_suite(name).eval)
    assert cfg.system_prompt == ARES_SYSTEM and cfg.prompt_template is None and cfg.max_new_tokens == 16384
    assert resolve_config(config=None, set_=None, flags={}).system_prompt is None  # the default sends none


def test_paec_suite_appends_verls_boxed_instruction_and_it_reaches_the_prompt():
    from ares_cli.toy.tokenizer import build_tokenizer

    cfg = resolve_config(config=None, set_=None, flags={}, base=load_suite("paec-math").eval)
    text = render_prompt(
        build_tokenizer(), "Find $x$.", system_prompt=cfg.system_prompt, template=cfg.prompt_template
    )
    assert "Find $x$. Let's think step by step and output the final answer within \\boxed{}." in text
    ares = resolve_config(config=None, set_=None, flags={}, base=load_suite("ares-mm").eval)
    assert ARES_SYSTEM in render_prompt(build_tokenizer(), "Q", system_prompt=ares.system_prompt)

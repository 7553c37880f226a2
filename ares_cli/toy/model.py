"""The toy model: a tiny standard Llama causal LM, so it loads and generates like any real checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The toy models' generation budget (their generation_config.json max_new_tokens): the longest toy prompt
# (72 tokens text, 83 with an image) plus 400 fits the 640-token context, so every stage runs with no flag.
TOY_MAX_NEW_TOKENS = 400


@dataclass(frozen=True)
class ToyModelShape:
    """Size of the tiny Llama (defaults give about 0.8 M parameters)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 640

    def as_dict(self) -> dict:
        return asdict(self)


def llama_config(tokenizer, shape: ToyModelShape):
    """A ``LlamaConfig`` for ``shape`` whose special token ids come from ``tokenizer``."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        max_position_embeddings=shape.max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_model(tokenizer, shape: ToyModelShape, seed: int):
    """A freshly initialised ``LlamaForCausalLM`` (fp32), deterministic in ``seed``."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(tokenizer, shape))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.max_new_tokens = TOY_MAX_NEW_TOKENS
    return model


def count_parameters(model) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())

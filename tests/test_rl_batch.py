"""The RL batch's typed carriers: every tensor field is sliced by ``rows`` (a field added later too), and a
misspelt field name fails where it is written or read."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ares_cli.training.rl.batch import BatchMeta, RolloutBatch, SequenceValues, TokenValues, collate


def _batch() -> RolloutBatch:
    """Three rows; row 1 has the longest response (4 tokens), rows 0 and 2 need 2 columns."""
    from ares_cli.training.rl.rollout import Group

    groups = [Group(0, "p0", [1, 2], [[3, 4], [5, 6, 7, 8]], ["stop"] * 2, ["correct", "incorrect"]),
              Group(1, "p1", [9], [[10, 11]], ["stop"], ["correct"])]  # fmt: skip
    return collate(groups, pad_id=0)


def _filled(batch: RolloutBatch) -> RolloutBatch:
    """Every carrier field set to a distinct tensor: row i, column t holds 100 * field + 10 * i + t."""
    n, r = batch.response_mask.shape
    rows, cols = torch.arange(n)[:, None], torch.arange(r)[None]
    for k, f in enumerate(dataclasses.fields(SequenceValues)):
        setattr(batch.seq, f.name, 100.0 * k + 10.0 * torch.arange(n))
    for k, f in enumerate(dataclasses.fields(TokenValues)):
        setattr(batch.tok, f.name, (100.0 * k + 10.0 * rows + cols).expand(n, r).clone())
    return batch


@pytest.mark.parametrize("index", [slice(0, 1), slice(1, 3), torch.tensor([2, 0])])
def test_rows_slices_every_field_of_both_carriers(index):
    batch = _filled(_batch())
    picked = torch.arange(len(batch))[index].tolist()
    part = batch.rows(index)
    keep = part.response_mask.shape[1]
    assert keep == max(
        int(batch.response_mask[i].sum()) for i in picked
    )  # lengths 2, 4, 2: trimmed to the longest
    for f in dataclasses.fields(SequenceValues):
        assert getattr(part.seq, f.name).tolist() == getattr(batch.seq, f.name)[picked].tolist(), f.name
    for f in dataclasses.fields(TokenValues):
        expect = getattr(batch.tok, f.name)[picked][:, :keep]
        assert getattr(part.tok, f.name).tolist() == expect.tolist(), f.name
    assert part.meta is batch.meta  # batch-level values are shared, not copied


def test_a_field_added_to_a_carrier_is_sliced_without_touching_rows():
    """``rows`` and ``to`` read the carriers' fields from dataclasses.fields: a new field needs no edit there."""
    extended_seq = dataclasses.make_dataclass(
        "ExtendedSequenceValues", [("probe", "Tensor | None", dataclasses.field(default=None))],
        bases=(SequenceValues,), slots=True,
    )  # fmt: skip
    extended_tok = dataclasses.make_dataclass(
        "ExtendedTokenValues", [("probe", "Tensor | None", dataclasses.field(default=None))],
        bases=(TokenValues,), slots=True,
    )  # fmt: skip
    base = _batch()
    n, r = base.response_mask.shape
    batch = dataclasses.replace(base, seq=extended_seq(probe=torch.arange(n) * 1.0),
                                tok=extended_tok(probe=torch.arange(n * r, dtype=torch.float32).reshape(n, r)))  # fmt: skip
    part = batch.rows(torch.tensor([2, 0]))
    assert type(part.seq) is extended_seq and type(part.tok) is extended_tok
    assert part.seq.probe.tolist() == [2.0, 0.0]
    assert part.tok.probe.tolist() == [[8.0, 9.0], [0.0, 1.0]]  # rows 2 and 0, trimmed to 2 columns
    assert part.seq.context_len is None and part.tok.old_logprob is None  # unset fields stay unset
    moved = batch.to("cpu")
    assert moved.seq.probe.tolist() == batch.seq.probe.tolist() and type(moved.tok) is extended_tok


def test_rows_of_a_slice_are_views_that_write_through():
    """The on-policy update fills each mini-batch's ``old_entropy`` in place (update.minibatch_backward): a
    slice of rows must share the batch's storage, as the dict carriers did."""
    batch = _batch()
    batch.tok.old_entropy = torch.zeros_like(batch.response_mask)
    part = batch.rows(slice(1, 3))
    part.tok.old_entropy[0, :2] = 7.0
    assert batch.tok.old_entropy[1, :2].tolist() == [7.0, 7.0]


def test_a_misspelt_field_is_an_attribute_error_at_once():
    batch = _batch()
    with pytest.raises(AttributeError, match="old_logprb"):
        batch.tok.old_logprb = torch.zeros(
            3, 4
        )  # a dict took this silently; the reader's KeyError came later
    with pytest.raises(AttributeError, match="corect"):
        _ = batch.seq.corect
    with pytest.raises(AttributeError, match="step_group"):
        batch.meta.step_group = 3
    with pytest.raises(AttributeError, match="sequence"):
        batch.sequence = SequenceValues()
    with pytest.raises(TypeError, match="base_rewards"):
        SequenceValues(base_rewards=torch.zeros(3))
    with pytest.raises(TypeError, match="tokeniser"):
        BatchMeta(tokeniser=None)


def test_rollout_pass_refuses_a_statistic_with_no_field(tiny_model_dir):
    """``rollout_pass`` stores ``prefix + name`` as a TokenValues field: a prefix with no such field fails
    at the pass, naming it, instead of leaving a key that no reader looks for."""
    from ares_cli.models import load_model
    from ares_cli.training.rl.batch import rollout_pass

    batch = _batch()
    model = load_model(tiny_model_dir)
    rollout_pass(model, batch, stats=("logprob", "entropy"), prefix="old_", micro=2, temperature=1.0)
    assert batch.tok.old_logprob.shape == batch.response_mask.shape
    assert bool((batch.tok.old_entropy[batch.response_mask == 0] == 0).all())
    with pytest.raises(AttributeError, match="olde_logprob"):
        rollout_pass(model, batch, stats=("logprob",), prefix="olde_", micro=2, temperature=1.0)


def test_every_carrier_field_is_typed():
    """The tensor carriers hold optional tensors only; no field of the batch or its carriers is ``Any``, and
    every annotation resolves to a real class."""
    import typing

    from transformers import PreTrainedTokenizerBase

    from ares_cli.models.vision import VisionInputs
    from ares_cli.training.rl import batch as module

    for carrier in (SequenceValues, TokenValues):
        assert {str(f.type) for f in dataclasses.fields(carrier)} == {"Tensor | None"}, carrier.__name__
    names = {"PreTrainedTokenizerBase": PreTrainedTokenizerBase, "VisionInputs": VisionInputs}
    for carrier in (SequenceValues, TokenValues, BatchMeta, RolloutBatch):
        assert not [f.name for f in dataclasses.fields(carrier) if "Any" in str(f.type)], carrier.__name__
        hints = typing.get_type_hints(carrier, {**vars(module), **names})
        assert set(hints) == {f.name for f in dataclasses.fields(carrier)}

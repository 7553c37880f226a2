"""Hostile weights files in a model directory (issue 34, part 1), through ``ares plan``: weights that are not
a regular file, a lying shard index, a tensor in two shards, side files that are not regular files. Each is
refused with exit 3 naming the file and the tensor or field (tests/test_hostile_models.py holds the
config.json and header cases; tests/hostile_model_dirs.py the builders)."""

from __future__ import annotations

import pytest
from hostile_model_dirs import (  # noqa: F401  (ModelInputHang names the tally's hang)
    ModelInputHang,
    _all_in,
    _config_file,
    _index,
    _weights_file,
    assert_refused,
    model_dir,
    plan_eval,
    write_weights,
)

WEIGHT_KINDS = ("directory", "fifo", "sparse-huge", "device")


@pytest.mark.parametrize("kind", WEIGHT_KINDS)
def test_weights_that_are_not_a_regular_file_are_refused_by_plan(tmp_path, kind):
    model = model_dir(tmp_path)
    words = _weights_file(kind, model / "model.safetensors")
    assert_refused(plan_eval(tmp_path, model), str(model / "model.safetensors"), words)


SHARDS_BAD = [
    ("index-names-missing-shard", {**_all_in("model.safetensors"), "model.norm.weight": "model-2.safetensors"}, "model-2.safetensors"),
    ("index-shard-outside", {**_all_in("model.safetensors"), "model.norm.weight": "../x.safetensors"}, "../x.safetensors"),
    ("index-map-a-list", ["model.safetensors"], "weight_map"),
    ("index-omits-a-tensor", {k: v for k, v in _all_in("model.safetensors").items() if k != "model.norm.weight"}, "model.norm.weight"),
    ("index-names-absent-tensor", {**_all_in("model.safetensors"), "model.ghost.weight": "model.safetensors"}, "model.ghost.weight"),
]  # fmt: skip


@pytest.mark.parametrize(("weight_map", "named"), [c[1:] for c in SHARDS_BAD], ids=[c[0] for c in SHARDS_BAD])
def test_a_lying_shard_index_is_refused_naming_it(tmp_path, weight_map, named):
    model = model_dir(tmp_path)
    _index(model, weight_map)
    assert_refused(plan_eval(tmp_path, model), str(model / "model.safetensors.index.json"), named)


def test_a_tensor_held_by_two_shards_is_refused(tmp_path):
    model = model_dir(tmp_path)
    write_weights(model / "extra.safetensors", {"model.norm.weight": ([128], "F32")})
    assert_refused(plan_eval(tmp_path, model), "model.norm.weight", "too")


@pytest.mark.parametrize(("name", "kind", "words"), [("tokenizer.json", "fifo", "FIFO"),
                                                     ("generation_config.json", "directory", "a directory"),
                                                     ("tokenizer_config.json", "device", "character device")])  # fmt: skip
def test_a_side_file_that_is_not_a_regular_file_is_refused(tmp_path, name, kind, words):
    model = model_dir(tmp_path)
    _config_file(kind, model / name)
    assert_refused(plan_eval(tmp_path, model), str(model / name), words)

"""verify's functional check loads A on a background thread while the tensors and invariants are compared
(idinspect/equivalence/loading.py): the model it hands over is the one a foreground load gives, and a
load that fails fails the same way, at the point where the functional check asks for the model."""

from __future__ import annotations

import shutil

import pytest
import torch

from idinspect.equivalence import functional as fn
from idinspect.equivalence.loading import BackgroundLoad, load_for_probe
from idinspect.errors import IdinspectError

PLAN = fn.LoadPlan(offload=False, compute_dtype=torch.float64)


def test_background_load_gives_the_foreground_model(tiny_dir):
    path = tiny_dir("llama-gqa")
    config, model = load_for_probe(path, PLAN)
    background = BackgroundLoad(path, PLAN)
    config2, model2 = background.take()
    assert config2.to_dict() == config.to_dict() and type(model2) is type(model)
    theirs = dict(model2.state_dict())
    for name, tensor in model.state_dict().items():
        assert theirs[name].dtype == torch.float64 and torch.equal(theirs[name], tensor), name
    with pytest.raises(RuntimeError, match="already taken"):
        background.take()


def test_a_failed_background_load_raises_on_take_and_drop_is_quiet(tiny_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dir("llama-gqa"), broken)
    (broken / "model.safetensors").unlink()
    background = BackgroundLoad(broken, PLAN)
    with pytest.raises(IdinspectError, match="transformers cannot load it"):
        background.take()
    BackgroundLoad(broken, PLAN).drop()          # nobody asks for it: no error, and the thread is done


def test_offloaded_plans_load_in_the_foreground(tiny_dir):
    with pytest.raises(ValueError, match="foreground"):
        BackgroundLoad(tiny_dir("llama-gqa"), fn.LoadPlan(offload=True, compute_dtype=torch.float32, max_memory=1))

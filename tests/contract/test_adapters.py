"""Each adapter is proven by the HF modules themselves: reference attention over the canonical
form equals the real attention output, layer by layer, in float64."""

import pytest
import torch

import idinspect
from idinspect.forms import reference_attention
from idinspect.layer.rotary import rotary_cos_sin
from tests.support import tiny


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("variant", sorted(tiny.VARIANTS))
def test_reference_attention_equals_hf_module(variant, tmp_path):
    hf = tiny.build(variant)
    tiny.save(hf, tmp_path)
    model = idinspect.load(tmp_path)
    torch.manual_seed(1)
    ids = torch.randint(0, tiny.vocab(hf), (2, tiny.VARIANTS[variant].tokens or 9))
    for i, (x, y, x_kv) in enumerate(tiny.capture_attention(hf, ids)):
        layer = model.layer(i)
        assert layer.index == i
        out = reference_attention(layer, x, x_kv=x_kv)
        assert _rel(out, y) <= 1e-10, f"{variant} layer {i}: {_rel(out, y):.2e}"


@pytest.mark.parametrize("variant", sorted(tiny.VARIANTS))
def test_read_write_round_trip_is_bit_exact(variant, tiny_dir):
    model = idinspect.load(tiny_dir(variant))
    for i in range(model.num_layers):
        written = model.adapter.write_layer(model.layer(i))
        assert sorted(written) == sorted(model.adapter.attention_keys(i))
        for name, tensor in written.items():
            original = model.reader.get(name)
            assert tensor.dtype == original.dtype and tensor.shape == original.shape
            assert torch.equal(tensor, original), name


def test_live_model_reads_like_its_checkpoint(tiny_dir):
    hf = tiny.build("llama-gqa")
    from_memory = idinspect.load(hf)
    from_disk = idinspect.load(tiny_dir("llama-gqa"))
    for a, b in zip(from_memory.layers(), from_disk.layers()):
        for role, t in a.tensors().items():
            assert torch.equal(t, getattr(b, role)), role
    assert from_memory.provenance.kind == "memory"


ROPE_VARIANTS = tiny.variants("rope")


@pytest.mark.parametrize("variant", ROPE_VARIANTS)
def test_rope_frequencies_are_the_models_own(variant, tmp_path):
    hf = tiny.build(variant, dtype=torch.float32)
    tiny.save(hf, tmp_path)
    model = idinspect.load(tmp_path)
    rotary = model.layer(0).positional.rotary
    # the text model's rotary module, wherever the family keeps it (model.rotary_emb, model.language_model.rotary_emb)
    module = next(m for name, m in hf.named_modules()
                  if name.split(".")[-1] == "rotary_emb" and "visual" not in name.split("."))
    if hasattr(module, "layer_types"):      # Gemma 3: one set of frequencies per layer type
        for i, layer_type in enumerate(hf.config.layer_types):
            rotary = model.layer(i).positional.rotary
            inv_freq = getattr(module, f"{layer_type}_inv_freq")
            assert rotary.inv_freq.dtype == inv_freq.dtype == torch.float32
            assert torch.equal(rotary.inv_freq, inv_freq), layer_type
            assert rotary.attention_factor == getattr(module, f"{layer_type}_attention_scaling")
            assert rotary.rope_type == module.rope_type[layer_type]
        return
    if not hasattr(module, "inv_freq"):   # GPT-J: a sinusoid table [positions, rotary_dim] = [sin | cos], float32
        table = module.embed_positions
        cos, sin = rotary_cos_sin(rotary, torch.arange(table.shape[0]), torch.float32)
        assert rotary.rope_type == "default" and rotary.attention_factor == 1.0
        assert torch.equal(table, torch.cat([sin, cos], dim=-1))
        return
    assert rotary.inv_freq.dtype == module.inv_freq.dtype == torch.float32
    assert torch.equal(rotary.inv_freq, module.inv_freq)
    assert rotary.attention_factor == module.attention_scaling
    assert rotary.rope_type == module.rope_type

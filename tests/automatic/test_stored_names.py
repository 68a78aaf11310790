"""--auto on folders transformers 5 saved: the tensors stored under other names than the live
module's (ViT's ``encoder.layer.i.attention.attention.query``, Qwen2-VL's text model below
``model.`` and its vision tower at the root, GPT-NeoX's ``embed_out``) and fused live tensors stored
in pieces (MoE experts: the live ``experts.gate_up_proj`` [E, 2I, d] as ``experts.e.gate_proj`` and
``experts.e.up_proj``) are read under the saved names, learned from the twin's own save_pretrained
and proven on the saved twin (idinspect/automatic/stored_names.py). A saved tensor no rule places is
still refused by name; a folder saved under the live names is read under those.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import idinspect
from idinspect.errors import IdinspectError
from tests.support.automatic import counted, hidden, reads_as_by_hand
from tests.support.tiny import VARIANTS, build

#: Saved names differ from the live ones: experts split (Mixtral, renamed block_sparse_moe too; Qwen3-MoE;
#: DeepSeek-V3's latent attention with MoE layers after a dense one), modules renamed (ViT), a text model
#: and a vision tower moved (Qwen2-VL), the output head renamed (GPT-NeoX).
SAVED_NAMES = ["mixtral", "qwen3-moe", "deepseek-v3", "vit", "qwen2-vl", "gpt-neox"]


@pytest.mark.parametrize("variant", SAVED_NAMES)
def test_a_folder_of_saved_names_reads_as_the_hand_written_adapter_reads_it(variant, tiny_dir):
    folder = tiny_dir(variant)
    model = reads_as_by_hand(folder, VARIANTS[variant].config().model_type)
    assert model.adapter.stored_as is not None          # read under the saved names
    names = set(load_file(folder / "model.safetensors"))
    assert {n for layer in range(model.num_layers) for n in model.adapter.attention_keys(layer)} <= names
    for module in model.adapter.unanalysed():       # an untraced tower (Qwen2-VL's vision) under its saved names
        assert set(module["tensors"]) <= names
        assert all(t.startswith(module["module"] + ".") for t in module["tensors"])


def _deeper(variant: str, layers: int, tmp_path: Path) -> Path:
    """``variant`` with more layers than the trace's twin has, saved: the rules carry layer numbers the twin never had."""
    v = VARIANTS[variant]
    config = v.config()
    for key, value in config.to_dict().items():
        if isinstance(value, list) and len(value) == config.num_hidden_layers:
            setattr(config, key, (value * layers)[:layers])
    config.num_hidden_layers = layers
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    model = v.model_class(config).to(torch.float64)
    model.save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.parametrize("variant", ["vit", "qwen3-moe"])
def test_saved_names_hold_for_layers_the_twin_does_not_have(variant, tmp_path):
    model = reads_as_by_hand(_deeper(variant, 5, tmp_path), VARIANTS[variant].config().model_type)
    assert model.adapter.stored_as is not None and model.num_layers == 5


def test_a_folder_saved_under_the_live_names_is_read_under_them(tmp_path):
    hf = build("vit")
    hf.save_pretrained(tmp_path, save_original_format=False)
    assert "vit.layers.0.attention.q_proj.weight" in load_file(tmp_path / "model.safetensors")
    with hidden("vit"):
        model = idinspect.load(tmp_path, auto=True)
        assert model.adapter.stored_as is None
        assert counted(model) == counted(idinspect.load(hf, auto=True))


def _resaved(folder: Path, out: Path, change) -> Path:
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    out.mkdir()
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text((folder / "config.json").read_text())
    return out


def test_a_saved_tensor_no_rule_places_is_refused_by_name(tiny_dir, tmp_path):
    stray = "model.layers.0.block_sparse_moe.experts.0.w4.weight"
    folder = _resaved(tiny_dir("mixtral"), tmp_path / "stray", lambda t: t.update({stray: torch.zeros(3, 3)}))
    with hidden("mixtral"):
        with pytest.raises(IdinspectError, match=r"neither reads nor declares: " + stray.replace(".", r"\.")):
            idinspect.load(folder, auto=True)


def test_a_layer_beyond_the_config_is_refused_under_saved_names(tiny_dir, tmp_path):
    def extra_layer(t):
        t["vit.encoder.layer.2.attention.attention.query.weight"] = t["vit.encoder.layer.0.attention.attention.query.weight"].clone()
    folder = _resaved(tiny_dir("vit"), tmp_path / "extra", extra_layer)
    with hidden("vit"):
        with pytest.raises(IdinspectError, match=r"tensors for layer 2 \(vit\.encoder\.layer\.2\.\*\)"):
            idinspect.load(folder, auto=True)


def test_the_rules_carry_indices_in_order_and_keep_apart_what_two_names_map_apart():
    """Learned from pairs (saved, live, whether a rename): a layer's index is carried to any layer, an
    expert's saved index is any expert of the fused live tensor, and indices a rename does not carry
    (a Sequential's ``mlp.0`` and ``mlp.2`` saved as ``fc1`` and ``fc2``) stay as they are."""
    from idinspect.adapters.stored_names import StoredNames

    from idinspect.automatic.stored_names import rules

    pairs = [(f"model.layers.{i}.mlp.experts.{e}.{part}_proj.weight", f"model.layers.{i}.mlp.experts.gate_up_proj", False)
             for i in (0, 1) for e in (0, 1) for part in ("gate", "up")]
    pairs += [(f"enc.layer.{i}.attention.query.weight", f"layers.{i}.attn.q_proj.weight", True) for i in (0, 1)]
    pairs += [("head.fc1.weight", "head.mlp.0.weight", True), ("head.fc2.weight", "head.mlp.2.weight", True)]
    names = StoredNames("", *rules(pairs))
    assert names.live("model.layers.9.mlp.experts.7.up_proj.weight") == "model.layers.9.mlp.experts.gate_up_proj"
    assert names.saved("layers.12.attn.q_proj.weight") == "enc.layer.12.attention.query.weight"
    assert names.live("enc.layer.12.attention.query.weight") == "layers.12.attn.q_proj.weight"
    assert names.saved("head.mlp.0.weight") == "head.fc1.weight" and names.saved("head.mlp.2.weight") == "head.fc2.weight"
    assert names.live("head.fc2.weight") == "head.mlp.2.weight"
    assert names.live("model.layers.0.mlp.experts.0.w4.weight") is None        # placed nowhere
    with pytest.raises(IdinspectError, match="model.layers.0.mlp.experts.gate_up_proj"):
        names.saved("model.layers.0.mlp.experts.gate_up_proj")                  # fused: no one saved name
    assert names.saved_container("layers.3") == "enc.layer"

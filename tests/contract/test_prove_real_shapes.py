"""--prove on one real-shaped configuration per family: the widths, head counts, kv groups and head
widths of a published checkpoint (named beside each row), with the tiny variant's few layers, small
MLP and vocabulary and random weights. The twin each one builds must pass its family's transformers
config validation (Gemma 3 270M's d = 640, H = 4, d_k = 256 once gave a twin of width 10 that no
config accepts) and its Jacobian nullity must equal its structural count."""

import pytest
import torch

import idinspect
from idinspect.analysis import prove as prove_mod
from idinspect.numerics import twin as twin_mod
from tests.support import tiny

#: variant: (checkpoint whose attention shape it takes, config attribute -> value).
REAL_SHAPES = {
    "albert-shared": ("albert-base-v2", {"hidden_size": 768, "num_attention_heads": 12}),
    "bart": ("facebook/bart-base", {"d_model": 768, "encoder_attention_heads": 12, "decoder_attention_heads": 12}),
    "whisper": ("openai/whisper-tiny", {"d_model": 384, "encoder_attention_heads": 6, "decoder_attention_heads": 6}),
    "bert": ("bert-base-uncased", {"hidden_size": 768, "num_attention_heads": 12}),
    "distilbert": ("distilbert-base-uncased", {"dim": 768, "n_heads": 12, "hidden_dim": 32}),
    "clip-vision-model": ("openai/clip-vit-base-patch32", {"hidden_size": 768, "num_attention_heads": 12}),
    "siglip-text-model": ("google/siglip-base-patch16-224", {"hidden_size": 768, "num_attention_heads": 12}),
    "cohere": ("CohereForAI/c4ai-command-r7b-12-2024", {"hidden_size": 4096, "num_attention_heads": 32,
                                                      "num_key_value_heads": 8}),
    "opt": ("facebook/opt-125m", {"hidden_size": 768, "num_attention_heads": 12, "word_embed_proj_dim": 768}),
    "gpt-bigcode-mqa": ("bigcode/gpt_bigcode-santacoder", {"n_embd": 2048, "n_head": 16}),
    "falcon-mqa": ("tiiuae/falcon-7b", {"hidden_size": 4544, "num_attention_heads": 71}),
    "bloom": ("bigscience/bloom-560m", {"hidden_size": 1024, "n_head": 16}),
    "deepseek-v2": ("deepseek-ai/DeepSeek-V2-Lite", {"hidden_size": 2048, "num_attention_heads": 16,
                                                     "num_key_value_heads": 16, "q_lora_rank": None,
                                                     "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                                                     "qk_rope_head_dim": 64, "v_head_dim": 128,
                                                     "qk_head_dim": 192, "head_dim": 64}),
    "gemma-mqa": ("google/gemma-2b", {"hidden_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 1,
                                      "head_dim": 256}),
    "gemma2-softcap": ("google/gemma-2-2b", {"hidden_size": 2304, "num_attention_heads": 8,
                                             "num_key_value_heads": 4, "head_dim": 256, "query_pre_attn_scalar": 256}),
    "gemma3-text": ("google/gemma-3-270m", {"hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1,
                                            "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 512}),
    "gpt2": ("gpt2", {"n_embd": 768, "n_head": 12}),
    "gpt-neox": ("EleutherAI/pythia-160m", {"hidden_size": 768, "num_attention_heads": 12}),
    "gpt-oss": ("openai/gpt-oss-20b", {"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
                                       "head_dim": 64}),
    "gptj": ("EleutherAI/gpt-j-6b", {"n_embd": 4096, "n_head": 16, "rotary_dim": 64}),
    "granite": ("ibm-granite/granite-3.0-2b-base", {"hidden_size": 2048, "num_attention_heads": 32,
                                                    "num_key_value_heads": 8}),
    "llama-gqa": ("meta-llama/Llama-3.2-1B", {"hidden_size": 2048, "num_attention_heads": 32,
                                              "num_key_value_heads": 8, "head_dim": 64}),
    "mistral": ("mistralai/Mistral-7B-v0.1", {"hidden_size": 4096, "num_attention_heads": 32,
                                              "num_key_value_heads": 8, "head_dim": 128}),
    "qwen2": ("Qwen/Qwen2.5-0.5B", {"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}),
    "llama4-text": ("meta-llama/Llama-4-Scout-17B-16E", {"hidden_size": 5120, "num_attention_heads": 40,
                                                         "num_key_value_heads": 8, "head_dim": 128}),
    "modernbert": ("answerdotai/ModernBERT-base", {"hidden_size": 768, "num_attention_heads": 12}),
    "mpnet": ("sentence-transformers/all-mpnet-base-v2", {"hidden_size": 768, "num_attention_heads": 12}),
    "olmo2": ("allenai/OLMo-2-0425-1B", {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16}),
    "phi": ("microsoft/phi-2", {"hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 32}),
    "phi3": ("microsoft/Phi-3-mini-4k-instruct", {"hidden_size": 3072, "num_attention_heads": 32,
                                                  "num_key_value_heads": 32}),
    "qwen2-moe": ("Qwen/Qwen1.5-MoE-A2.7B", {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16}),
    "qwen3": ("Qwen/Qwen3-0.6B", {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
                                  "head_dim": 128}),
    "stablelm": ("stabilityai/stablelm-2-1_6b", {"hidden_size": 2048, "num_attention_heads": 32,
                                                 "num_key_value_heads": 32}),
    "starcoder2": ("bigcode/starcoder2-3b", {"hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 2}),
    "t5": ("google-t5/t5-small", {"d_model": 512, "num_heads": 8, "d_kv": 64}),
    "vit": ("google/vit-base-patch16-224", {"hidden_size": 768, "num_attention_heads": 12}),
    "smollm3-nope": ("HuggingFaceTB/SmolLM3-3B", {"hidden_size": 2048, "num_attention_heads": 16,
                                                  "num_key_value_heads": 4, "head_dim": 128}),
    "seed_oss": ("ByteDance-Seed/Seed-OSS-36B-Instruct", {"hidden_size": 5120, "num_attention_heads": 80,
                                                          "num_key_value_heads": 8, "head_dim": 128}),
    "olmo": ("allenai/OLMo-1B-hf", {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
                                    "head_dim": 128}),
    "glm4": ("THUDM/GLM-4-9B-0414", {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2,
                                     "head_dim": 128}),
    "nemotron": ("nvidia/Minitron-4B-Base", {"hidden_size": 3072, "num_attention_heads": 24,
                                             "num_key_value_heads": 8, "head_dim": 128}),
    "mpt": ("mosaicml/mpt-7b", {"d_model": 4096, "n_heads": 32}),
    "mllama-text": ("meta-llama/Llama-3.2-11B-Vision (text model)", {"hidden_size": 4096, "num_attention_heads": 32,
                                                                     "num_key_value_heads": 8}),
    "minicpm3": ("openbmb/MiniCPM3-4B", {"hidden_size": 2560, "num_attention_heads": 40, "num_key_value_heads": 40,
                                         "q_lora_rank": 768, "kv_lora_rank": 256, "qk_nope_head_dim": 64,
                                         "qk_rope_head_dim": 32, "v_head_dim": 64}),
    "xlm-roberta-xl": ("facebook/xlm-roberta-xl", {"hidden_size": 2560, "num_attention_heads": 32}),
    "qwen2-vl": ("Qwen/Qwen2-VL-2B-Instruct", {"text_config.hidden_size": 1536, "text_config.num_attention_heads": 12,
                                               "text_config.num_key_value_heads": 2, "text_config.head_dim": 128,
                                               "text_config.rope_parameters": {"rope_type": "default",
                                                                               "rope_theta": 1000000.0,
                                                                               "mrope_section": [16, 24, 24]}}),
}


def real_shaped(variant: str):
    """The tiny variant's model at the real checkpoint's attention shape (float32, N(0, 0.02) weights,
    transformers' own initialisation skipped: it is what makes a 5120-wide layer slow to build)."""
    from transformers.initialization import no_init_weights

    factory, cls = tiny.VARIANTS[variant]
    config = factory()
    for name, value in REAL_SHAPES[variant][1].items():   # "text_config.hidden_size": the text model's
        *path, attr = name.split(".")
        target = config
        for part in path:
            target = getattr(target, part)
        setattr(target, attr, value)
    with no_init_weights():
        model = cls(config)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=g)
    return model


def test_every_family_has_a_real_shape():
    from idinspect.adapters import ADAPTERS

    shaped = {ADAPTERS[tiny.VARIANTS[v][0]().model_type].family for v in REAL_SHAPES}
    assert shaped == {ADAPTERS[t].family for t in ADAPTERS}


@pytest.mark.parametrize("variant", sorted(REAL_SHAPES))
def test_the_family_accepts_the_twin_of_a_real_shape(variant):
    """The twin's config passes the family's validation and its model builds, at most 8 heads."""
    model = idinspect.load(real_shaped(variant))
    if model.form == "latent":
        from idinspect.forms.latent.prove import latent_twin_shape

        shape = latent_twin_shape(model)
    else:
        shape = twin_mod.twin_shape(model)
        assert shape["hidden_size"] % shape["heads"] == 0 and shape["heads"] <= 8
    twin, _ = twin_mod.build_twin(model, shape=shape)
    assert twin.config.model_type == model.hf_config.model_type


#: The proof itself, where the real shape once broke it (Gemma 3 270M: a twin no config accepted;
#: Falcon-7B: 71 query heads on one key head) and at the shapes whose d differs from H d_k.
PROVEN = ["gemma3-text", "falcon-mqa", "qwen3", "gemma-mqa", "qwen2-vl", "glm4"]


@pytest.mark.parametrize("variant", PROVEN)
def test_prove_holds_at_the_real_shape(variant):
    proof = prove_mod.prove(idinspect.load(real_shaped(variant)))
    assert proof["agree"] is True, proof
    assert proof["jacobian_nullity"] == proof["structural_unidentified"] > 0


def test_twin_width_is_a_multiple_of_its_heads_on_the_same_side():
    # Gemma 3 270M: d = 640 < H d_k = 1024 and > d_k = 256; the twin keeps both, with d' = 0 mod H'
    assert twin_mod.twin_width(640, 4, 1, 256, 4, 1, 4) == 8
    # Qwen3 0.6B: d = 1024 < H d_k = 2048, = G d_k: d' = G' d_k' = 8 kept equal
    assert twin_mod.twin_width(1024, 16, 8, 128, 4, 2, 4) == 8
    # Llama 3.2 1B: d = H d_k
    assert twin_mod.twin_width(2048, 32, 8, 64, 8, 2, 4) == 32


def test_a_twin_the_family_refuses_is_one_line(monkeypatch, tiny_dir):
    """Where transformers' config validation refuses a twin, --prove says so in one line, exit 2."""
    from tests.support.cli import run_cli

    monkeypatch.setattr(twin_mod, "twin_width", lambda *a: 10)
    res = run_cli(tiny_dir("gemma3-text"), "--prove", "--format", "json")
    assert res.code == 2
    line = res.stderr.strip()
    assert "\n" not in line and "\\x0a" not in line and "internal error" not in line
    assert "--prove: no twin can be built" in line and "Gemma3TextConfig" in line


def test_a_multi_line_internal_error_is_one_line_without_escapes(monkeypatch, tiny_dir):
    from tests.support.cli import run_cli

    def boom(model, seed=0):
        raise RuntimeError("Class validation error:\n    ValueError: no")

    monkeypatch.setattr(prove_mod, "prove", boom)
    res = run_cli(tiny_dir("gpt2"), "--prove")
    assert res.code == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "Class validation error: ValueError: no" in res.stderr and "\\x0a" not in res.stderr

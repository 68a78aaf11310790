"""The models of ``bench/disguise.py`` in one family-neutral working form, and back.

Working form (``work``): float64 tensors in nn.Linear layout [out, in] under generic names, per layer
i: ``{i}.q``, ``{i}.k``, ``{i}.v`` (rows head-major), ``{i}.o`` [d, H d_v], their biases ``{i}.q.b``..,
``{i}.n1`` / ``{i}.n1.b`` (the norm in front of attention; BERT: the one after it), ``{i}.n2`` (in front of
the MLP; BERT: after it), ``{i}.gate`` / ``{i}.up`` [f, d], ``{i}.down`` [d, f] (+ biases); model-wide
``emb`` (token embeddings [V, d]), ``pos`` / ``type`` (BERT, GPT-2), ``emb_norm`` (BERT), ``nf`` (final
norm), ``head`` (untied LM head), ``pooler`` (BERT). :class:`Meta` says how the family computes.

Only what the benchmark needs: Llama, Qwen2, Gemma (v1), GPT-2, BERT. Checkpoints are written with
safetensors (never pickles) and read back the same way.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

#: Vocabulary kept for the 1B-shaped model (embedding rows only; attention and MLP keep the 1B shape).
VOCAB_CAP = 4096


@dataclass
class Meta:
    family: str                  # llama | qwen2 | gemma | gpt2 | bert
    config: dict                 # config.json as written (vocab possibly capped)
    layers: int
    d: int
    heads: int
    kv_heads: int
    d_k: int
    norm: str                    # rms | gemma (gain 1 + w) | ln (gain and bias)
    post_ln: bool                # BERT: the norm's output is the residual stream
    rope: bool
    gated: bool
    tied: bool
    dtype: torch.dtype           # stored dtype of the original
    notes: list[str] = field(default_factory=list)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


LLAMA_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
               "n1": "input_layernorm", "n2": "post_attention_layernorm", "gate": "mlp.gate_proj",
               "up": "mlp.up_proj", "down": "mlp.down_proj"}
BERT_NAMES = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense", "n1": "attention.output.LayerNorm", "up": "intermediate.dense",
              "down": "output.dense", "n2": "output.LayerNorm"}


def meta_of(config: dict, dtype: torch.dtype) -> Meta:
    mt = config["model_type"]
    if mt in ("llama", "qwen2", "gemma", "mistral"):
        H = config["num_attention_heads"]
        dk = config.get("head_dim") or config["hidden_size"] // H
        return Meta(mt, config, config["num_hidden_layers"], config["hidden_size"], H,
                    config.get("num_key_value_heads") or H, dk, "gemma" if mt == "gemma" else "rms", False, True, True,
                    bool(config.get("tie_word_embeddings", mt == "gemma")), dtype)
    if mt == "gpt2":
        H, d = config["n_head"], config["n_embd"]
        return Meta(mt, config, config["n_layer"], d, H, H, d // H, "ln", False, False, False,
                    bool(config.get("tie_word_embeddings", True)), dtype)
    if mt == "bert":
        H, d = config["num_attention_heads"], config["hidden_size"]
        return Meta(mt, config, config["num_hidden_layers"], d, H, H, d // H, "ln", True, False, False, False, dtype)
    raise ValueError(f"model_type {mt!r} is not in the disguise benchmark")


def to_work(sd: dict[str, torch.Tensor], meta: Meta) -> dict[str, torch.Tensor]:
    """HF state dict (any dtype) -> working form (float64)."""
    f = {k: v.to(torch.float64) for k, v in sd.items() if v.is_floating_point()}
    w: dict[str, torch.Tensor] = {}
    if meta.family == "gpt2":
        p = "transformer." if "transformer.wte.weight" in f else ""
        w["emb"], w["pos"] = f[p + "wte.weight"], f[p + "wpe.weight"]
        d = meta.d
        for i in range(meta.layers):
            h = f"{p}h.{i}."
            W, b = f[h + "attn.c_attn.weight"].T, f[h + "attn.c_attn.bias"]
            for j, n in enumerate("qkv"):
                w[f"{i}.{n}"], w[f"{i}.{n}.b"] = W[j * d:(j + 1) * d].clone(), b[j * d:(j + 1) * d].clone()
            w[f"{i}.o"], w[f"{i}.o.b"] = f[h + "attn.c_proj.weight"].T.clone(), f[h + "attn.c_proj.bias"]
            w[f"{i}.up"], w[f"{i}.up.b"] = f[h + "mlp.c_fc.weight"].T.clone(), f[h + "mlp.c_fc.bias"]
            w[f"{i}.down"], w[f"{i}.down.b"] = f[h + "mlp.c_proj.weight"].T.clone(), f[h + "mlp.c_proj.bias"]
            for n, name in (("n1", "ln_1"), ("n2", "ln_2")):
                w[f"{i}.{n}"], w[f"{i}.{n}.b"] = f[h + name + ".weight"], f[h + name + ".bias"]
        w["nf"], w["nf.b"] = f[p + "ln_f.weight"], f[p + "ln_f.bias"]
        if not meta.tied:
            w["head"] = f["lm_head.weight"]
        return w
    if meta.family == "bert":
        p = "bert." if "bert.embeddings.word_embeddings.weight" in f else ""
        e = p + "embeddings."
        w["emb"], w["pos"], w["type"] = (f[e + "word_embeddings.weight"], f[e + "position_embeddings.weight"],
                                         f[e + "token_type_embeddings.weight"])
        w["emb_norm"], w["emb_norm.b"] = f[e + "LayerNorm.weight"], f[e + "LayerNorm.bias"]
        for i in range(meta.layers):
            for n, name in BERT_NAMES.items():
                w[f"{i}.{n}"] = f[f"{p}encoder.layer.{i}.{name}.weight"]
                w[f"{i}.{n}.b"] = f[f"{p}encoder.layer.{i}.{name}.bias"]
        if p + "pooler.dense.weight" in f:
            w["pooler"], w["pooler.b"] = f[p + "pooler.dense.weight"], f[p + "pooler.dense.bias"]
        return w
    w["emb"] = f["model.embed_tokens.weight"]
    for i in range(meta.layers):
        for n, name in LLAMA_NAMES.items():
            w[f"{i}.{n}"] = f[f"model.layers.{i}.{name}.weight"]
            if f"model.layers.{i}.{name}.bias" in f:
                w[f"{i}.{n}.b"] = f[f"model.layers.{i}.{name}.bias"]
    w["nf"] = f["model.norm.weight"]
    if not meta.tied:
        w["head"] = f["lm_head.weight"]
    return w


def from_work(w: dict[str, torch.Tensor], meta: Meta, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Working form -> HF state dict in ``dtype`` (the layout of the family's own checkpoints)."""
    out: dict[str, torch.Tensor] = {}
    if meta.family == "gpt2":
        out["transformer.wte.weight"], out["transformer.wpe.weight"] = w["emb"], w["pos"]
        for i in range(meta.layers):
            h = f"transformer.h.{i}."
            out[h + "attn.c_attn.weight"] = torch.cat([w[f"{i}.{n}"] for n in "qkv"]).T
            out[h + "attn.c_attn.bias"] = torch.cat([w[f"{i}.{n}.b"] for n in "qkv"])
            out[h + "attn.c_proj.weight"], out[h + "attn.c_proj.bias"] = w[f"{i}.o"].T, w[f"{i}.o.b"]
            out[h + "mlp.c_fc.weight"], out[h + "mlp.c_fc.bias"] = w[f"{i}.up"].T, w[f"{i}.up.b"]
            out[h + "mlp.c_proj.weight"], out[h + "mlp.c_proj.bias"] = w[f"{i}.down"].T, w[f"{i}.down.b"]
            for n, name in (("n1", "ln_1"), ("n2", "ln_2")):
                out[h + name + ".weight"], out[h + name + ".bias"] = w[f"{i}.{n}"], w[f"{i}.{n}.b"]
        out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = w["nf"], w["nf.b"]
        if not meta.tied:
            out["lm_head.weight"] = w["head"]
    elif meta.family == "bert":
        e = "embeddings."
        out[e + "word_embeddings.weight"], out[e + "position_embeddings.weight"] = w["emb"], w["pos"]
        out[e + "token_type_embeddings.weight"] = w["type"]
        out[e + "LayerNorm.weight"], out[e + "LayerNorm.bias"] = w["emb_norm"], w["emb_norm.b"]
        for i in range(meta.layers):
            for n, name in BERT_NAMES.items():
                out[f"encoder.layer.{i}.{name}.weight"], out[f"encoder.layer.{i}.{name}.bias"] = w[f"{i}.{n}"], w[f"{i}.{n}.b"]
        if "pooler" in w:
            out["pooler.dense.weight"], out["pooler.dense.bias"] = w["pooler"], w["pooler.b"]
    else:
        out["model.embed_tokens.weight"] = w["emb"]
        for i in range(meta.layers):
            for n, name in LLAMA_NAMES.items():
                out[f"model.layers.{i}.{name}.weight"] = w[f"{i}.{n}"]
                if f"{i}.{n}.b" in w:
                    out[f"model.layers.{i}.{name}.bias"] = w[f"{i}.{n}.b"]
        out["model.norm.weight"] = w["nf"]
        if not meta.tied:
            out["lm_head.weight"] = w["head"]
    return {k: v.to(dtype).contiguous() for k, v in out.items()}


def save(w: dict[str, torch.Tensor], meta: Meta, folder: Path, dtype: torch.dtype) -> Path:
    """Write a checkpoint folder (config.json + model.safetensors) of the working form in ``dtype``."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    config = dict(meta.config)
    config["tie_word_embeddings"] = meta.tied
    config["torch_dtype"] = config["dtype"] = str(dtype).replace("torch.", "")
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file(from_work(w, meta, dtype), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def load(folder: Path, vocab_cap: int | None = None) -> tuple[dict[str, torch.Tensor], Meta]:
    """A checkpoint folder -> (working form, Meta); ``vocab_cap`` keeps the first rows of the token
    embedding and head only (the function on those tokens is unchanged)."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    sd = load_file(str(folder / "model.safetensors"))
    dtype = next(v.dtype for v in sd.values() if v.is_floating_point())
    meta = meta_of(config, dtype)
    w = to_work(sd, meta)
    del sd
    if vocab_cap is not None and config.get("vocab_size", 0) > vocab_cap:
        w["emb"] = w["emb"][:vocab_cap].clone()
        if "head" in w:
            w["head"] = w["head"][:vocab_cap].clone()
        meta.config = {**config, "vocab_size": vocab_cap}
        meta.notes.append(f"vocabulary cut to its first {vocab_cap} tokens (embedding rows only)")
    return w, meta


def hf_model(w: dict[str, torch.Tensor], meta: Meta):
    """A float64 transformers model computing the working form (eval mode, eager attention)."""
    cls = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM, "gemma": tf.GemmaForCausalLM,
           "mistral": tf.MistralForCausalLM, "gpt2": tf.GPT2LMHeadModel, "bert": tf.BertModel}[meta.family]
    config = tf.AutoConfig.for_model(**{k: v for k, v in meta.config.items() if k not in ("dtype", "torch_dtype")})
    config.tie_word_embeddings = meta.tied
    config._attn_implementation = "eager"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    sd = from_work(w, meta, torch.float64)
    if meta.family == "gpt2" and "transformer.wte.weight" in sd and meta.tied:
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
    if meta.family not in ("gpt2", "bert") and meta.tied:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids") and "rotary" not in k]
    if missing or unexpected:
        raise RuntimeError(f"state dict does not fit {cls.__name__}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval()


@torch.no_grad()
def outputs(w: dict[str, torch.Tensor], meta: Meta, ids: torch.Tensor) -> torch.Tensor:
    """float64 logits (causal LMs) or last hidden states (BERT) for token ids [B, T]."""
    model = hf_model(w, meta)
    out = model(input_ids=ids)
    y = out.last_hidden_state if meta.family == "bert" else out.logits
    del model
    return y.detach().clone()


TINY = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "head_dim": 8, "vocab_size": 256, "max_position_embeddings": 64,
                  "tie_word_embeddings": False},
    "qwen2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "tie_word_embeddings": True},
    "gemma": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 8,
                  "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 256, "max_position_embeddings": 64},
    "gpt2": {"n_embd": 64, "n_layer": 8, "n_head": 8, "vocab_size": 256, "n_positions": 64},
}


def tiny(family: str, seed: int, trained_gains: bool = True, **overrides):
    """A seeded tiny random transformers model of ``family`` (float32). ``trained_gains``: norm gains and
    biases drawn away from their init (ones, zeros) as training would leave them, so that folding and
    rescaling gains are real moves (GPT-2's final LayerNorm bias stays 0: its head has no bias)."""
    config = tf.AutoConfig.for_model(family, **{**TINY[family], **overrides})
    torch.manual_seed(seed)
    cls = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM, "gemma": tf.GemmaForCausalLM,
           "gpt2": tf.GPT2LMHeadModel}[family]
    model = cls(config).float().eval()
    if trained_gains:
        gen = torch.Generator().manual_seed(1000 + seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                    base = 0.0 if family == "gemma" else 1.0
                    p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
                elif p.dim() == 1 and name.endswith("bias") and name != "transformer.ln_f.bias":
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def save_hf(model, folder: Path) -> Path:
    """save_pretrained (safetensors) into a fresh folder."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    return folder


def clone(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in w.items()}


def copy_meta(meta: Meta) -> Meta:
    return copy.deepcopy(meta)

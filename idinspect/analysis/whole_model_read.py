"""The whole-model count of an open checkpoint: which form its family has, and the facts the count needs.

Reads the config, the safetensors headers and one small tensor (the final norm's gain, for the tie
term); never the MLP or embedding bytes. The mathematics is :mod:`idinspect.analysis.whole_model`.
A model type whose whole-model form is not derived is reported as such by name, never guessed.
"""

from __future__ import annotations

from .whole_model import (
    PRE_LN,
    PRE_RMS_GATED,
    WholeModelShape,
    multiplicities,
    not_derived,
    whole_model_counts,
)

#: model_type -> the derived whole-model form (docs/mathematics.md, "Whole-model symmetries").
FORM_BY_TYPE = {"llama": PRE_RMS_GATED, "mistral": PRE_RMS_GATED, "qwen2": PRE_RMS_GATED,
                "granite": PRE_RMS_GATED, "phi3": PRE_RMS_GATED, "mixtral": PRE_RMS_GATED,
                "gpt2": PRE_LN, "gpt_bigcode": PRE_LN}
#: Per form: (token embedding, final norm gain, head) below the model prefix / at the root.
NAMES = {PRE_RMS_GATED: ("embed_tokens.weight", "norm.weight", "lm_head.weight"),
         PRE_LN: ("wte.weight", "ln_f.weight", "lm_head.weight")}
#: The gated MLP of the pre-RMSNorm form below ``layers.{n}.`` (separate projections; Phi-3 fuses gate_up).
GATED_MLP_NAMES = {"gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight",
                   "norm": "post_attention_layernorm.weight"}
#: Architectures whose outputs are the logits of a language-model head.
HEADS = ("ForCausalLM", "LMHeadModel")


def stored_key(model, name: str) -> str | None:
    """The stored key of ``name`` below the prefix, else at the root; None: not stored."""
    for key in (f"{model.adapter.prefix}{name}", name):
        if key in model.reader:
            return key
    return None


def head_kind(model, form: str) -> str | None:
    """'untied' (a head of its own is stored), 'tied' (a language-model head that reuses the
    embeddings), None (no head: the outputs are hidden states)."""
    if stored_key(model, NAMES[form][2]) is not None:
        return "untied"
    archs = getattr(model.config, "architectures", None) or []
    tie = model.adapter.optional("tie_word_embeddings", True)
    return "tied" if tie and any(a.endswith(HEADS) for a in archs) else None


def why_not_derived(model, form: str | None) -> str | None:
    """Why this checkpoint is outside the derived forms (None: it is inside)."""
    mt = model.config.model_type
    if form is None:
        return (f"the whole-model form of model_type {mt!r} is not derived: its symmetries beyond attention are not "
                "counted (the attention counts are)")
    if head_kind(model, form) is None:
        return "no language-model head (the outputs are hidden states): the whole-model form is derived for logits"
    if form == PRE_LN and (head_kind(model, form) != "tied" or model.adapter.optional("add_cross_attention", False)):
        return "the pre-LayerNorm form is derived for a tied head without cross-attention only"
    return None


def shape_of(model, attention: int) -> WholeModelShape:
    """The :class:`WholeModelShape` of ``model`` (a derived form; see :func:`whole_model`)."""
    a, cfg = model.adapter, model.config
    form = FORM_BY_TYPE[cfg.model_type]
    embed, final, _ = NAMES[form]
    embed_key, gain_key = stored_key(model, embed), stored_key(model, final)
    vocab = int(model.reader.shape(embed_key)[0])
    gains = model.reader.get(gain_key).reshape(-1).tolist()     # d values: the one tensor read here
    common = dict(layers=a.num_layers, width=a.hidden_size, vocab=vocab, head=head_kind(model, form), attention=attention,
                  final_gain_multiplicities=multiplicities(gains),
                  embedding_bytes_per_value=model.reader.dtype(embed_key).itemsize)
    if form == PRE_RMS_GATED:
        moe = dict(experts=int(cfg.num_local_experts), experts_per_token=int(cfg.num_experts_per_tok)) \
            if cfg.model_type == "mixtral" else {}
        return WholeModelShape(form, mlp_width=int(cfg.intermediate_size), eps=float(cfg.rms_norm_eps), **moe, **common)
    H, G, hd = a.n_heads, a.n_kv_heads, a.head_dim
    if cfg.model_type == "gpt_bigcode" and a.optional("multi_query", True):
        G = 1
    inner = a.optional("n_inner") or 4 * a.hidden_size
    positions = int(model.reader.shape(stored_key(model, "wpe.weight"))[0])
    return WholeModelShape(form, mlp_width=int(inner), eps=float(cfg.layer_norm_epsilon), positions=positions,
                           attention_read=(H + 2 * G) * hd, attention_written=H * hd,
                           activation=str(a.optional("activation_function", "")), **common)


def attention_from_headers(model) -> int:
    """The blocks' structural attention counts summed (:func:`idinspect.forms.per_head.structure.unidentified_dims`),
    from the safetensors headers only (the blocks read through a shape-only view: no tensor data)."""
    import copy

    from ..forms.per_head.structure import unidentified_dims
    from ..sources.checkpoint import ShapeOnlyReader

    probe = copy.copy(model.adapter)
    probe.reader = ShapeOnlyReader(model.reader)
    return sum(unidentified_dims(probe.read_layer(i)) for i in range(model.num_layers))


def whole_model(model, attention: int) -> dict:
    """The ``whole_model`` section for ``model`` whose blocks' attention counts sum to ``attention``
    (plus ``parameters``: the stored parameters per part, :func:`~idinspect.sources.coverage.inventory`)."""
    from ..sources.coverage import inventory

    parts = inventory(model.adapter, model.reader)
    form = FORM_BY_TYPE.get(model.config.model_type)
    why = why_not_derived(model, form)
    out = not_derived(model.config.model_type, why) if why else whole_model_counts(shape_of(model, attention))
    out["parameters"] = parts
    total = sum(parts.values())
    if out["derived"]:
        out["ratio"] = out["exact"] / total if total else 0.0
    out["parameters_total"] = total
    return out


__all__ = ["FORM_BY_TYPE", "NAMES", "attention_from_headers", "head_kind", "shape_of", "stored_key", "whole_model", "why_not_derived"]

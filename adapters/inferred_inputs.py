"""The extra inputs an inferred adapter's model needs for every attention block to run: states for
cross-attention that the model takes but has no encoder for (a decoder saved alone: BartForCausalLM;
Mllama's text model, whose cross-attention layers read image states), with a mask that shows every
state where the model takes one. Decided from the model's forward signature and by running it."""

from __future__ import annotations

import torch


def cross_states_argument(hf, inputs: dict) -> str | None:
    """The keyword under which ``hf`` (a live model) takes states for cross-attention that ``inputs`` do
    not give, with no ``decoder_input_ids`` of its own, where it runs with them (:func:`cross_inputs`):
    ``encoder_hidden_states`` (a decoder without its encoder: BartForCausalLM), or another ``*_states``
    argument naming cross-attention (Mllama's text model: ``cross_attention_states``); None otherwise."""
    import inspect

    params = inspect.signature(hf.forward).parameters
    ids = inputs.get("input_ids")
    if "decoder_input_ids" in params or ids is None:
        return None
    for name in [n for n in params if n == "encoder_hidden_states" or (n.endswith("_states") and "cross" in n)]:
        if name in inputs:
            return None
        try:
            with torch.no_grad():
                hf(**inputs, **cross_inputs(hf, name, ids, torch.Generator().manual_seed(0)), use_cache=False)
        except Exception:  # noqa: BLE001, S112 - a model that refuses states it cannot use (a BERT decoder without cross-attention)
            continue
        return name
    return None


def cross_inputs(hf, name: str, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """N(0, 1) states for cross-attention under ``name`` (:func:`encoder_states`) and, where ``hf``'s
    forward takes ``{stem}_mask`` beside ``{stem}_states`` (not for ``encoder_hidden_states``), an additive
    mask [B, 1, T, S] of zeros: every state visible to every token (without a mask sdpa masks Mllama's
    cross-attention causally)."""
    import inspect

    states = encoder_states(hf, input_ids, generator)
    out = {name: states}
    mask = name[:-len("_states")] + "_mask"
    if name != "encoder_hidden_states" and mask in inspect.signature(hf.forward).parameters:
        B, T = input_ids.shape
        out[mask] = torch.zeros(B, 1, T, states.shape[1], dtype=states.dtype)
    return out


def encoder_states(hf, input_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """N(0, 1) encoder states [B, T + 3, d] for ``input_ids`` [B, T], in ``hf``'s dtype."""
    B, T = input_ids.shape
    return torch.randn(B, T + 3, int(hf.config.hidden_size), generator=generator, dtype=next(hf.parameters()).dtype)


__all__ = ["cross_inputs", "cross_states_argument", "encoder_states"]

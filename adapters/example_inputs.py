"""Forward arguments that run every attention block of a transformers model, for the proofs
(``--prove``, the Jacobian tests) and ``verify``'s functional check: decided from the model (its main
input, ``is_encoder_decoder``, ``add_cross_attention``, a vision tower), never from its family."""

from __future__ import annotations

import torch


def example_inputs(hf_model, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Forward arguments that run every attention block of ``hf_model`` on ``input_ids`` [B, T],
    decided from the model (its main input, ``is_encoder_decoder``, ``add_cross_attention``), not its
    family. Speech encoders get N(0, 1) features and ``input_ids`` as decoder tokens; vision encoders
    N(0, 1) ``pixel_values``, models with a text and a vision tower both (token ids alone where images
    enter as image tokens in the text, Llama 4); an
    encoder-decoder gets ``input_ids`` for both stacks; a decoder that cross-attends without an
    encoder of its own gets N(0, 1) encoder states of T + 3 positions."""
    cfg = hf_model.config
    dtype = next(hf_model.parameters()).dtype
    B, T = input_ids.shape
    main = getattr(hf_model, "main_input_name", "input_ids")
    if main == "input_features":
        features = torch.randn(B, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=generator, dtype=dtype)
        return {"input_features": features, "decoder_input_ids": input_ids}
    if main == "pixel_values":
        return {"pixel_values": pixel_values(cfg, B, generator, dtype)}
    if getattr(cfg, "vision_config", None) is not None:
        if _image_token(cfg) is not None:     # images enter as image tokens in the text (Llama 4): text only
            return {"input_ids": input_ids}
        return {"input_ids": input_ids, "pixel_values": pixel_values(cfg.vision_config, B, generator, dtype)}  # CLIP, SigLIP
    if getattr(cfg, "is_encoder_decoder", False):
        return {"input_ids": input_ids, "decoder_input_ids": input_ids}
    if getattr(cfg, "add_cross_attention", False):
        states = torch.randn(B, T + 3, cfg.hidden_size, generator=generator, dtype=dtype)
        return {"input_ids": input_ids, "encoder_hidden_states": states}
    return {"input_ids": input_ids}


def _image_token(cfg) -> int | None:
    """The token id that marks where image features go in the text (``image_token_index`` /
    ``image_token_id``), or None for two-tower models that take images apart (CLIP, SigLIP)."""
    for name in ("image_token_index", "image_token_id"):
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return None


def pixel_values(vision_config, batch: int, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """N(0, 1) images [batch, num_channels, height, width] of the size a vision config expects."""
    size = vision_config.image_size
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    channels = getattr(vision_config, "num_channels", 3)
    return torch.randn(batch, channels, h, w, generator=generator, dtype=dtype)

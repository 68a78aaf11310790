"""Which stacks of an encoder-decoder family a checkpoint holds.

``T5EncoderModel`` (the text encoder of many image and video generators), ``MT5EncoderModel`` and
``UMT5EncoderModel`` save the encoder alone; ``BartForCausalLM``, ``MarianForCausalLM`` and
``WhisperForCausalLM`` the decoder alone (no cross-attention then: their decoder attends to the
encoder only when states are passed in, which the checkpoint cannot say); ``WhisperForAudioClassification``
the encoder alone. The architecture in config.json says which; without one, the stacks whose first
layer is stored are the ones there. A stack the architecture names but the checkpoint lacks stays
an incomplete checkpoint (the adapter's own error names the missing tensor).
"""

from __future__ import annotations

#: Architecture name endings that hold the encoder stack only.
ENCODER_ONLY = ("EncoderModel", "ForAudioClassification")
#: Architecture name endings that hold the decoder stack only.
DECODER_ONLY = ("ForCausalLM",)


def stored_stacks(config, keys, first_weights: dict[str, str]) -> tuple[str, ...]:
    """The stacks of ``first_weights`` (stack -> its first layer's first weight, without prefix, e.g.
    ``{"encoder": "encoder.block.0.layer.0.SelfAttention.q.weight", ...}``) that the checkpoint holds,
    in that dict's order: by ``config.architectures[0]``, else by which first weights ``keys`` has
    (every stack if none)."""
    archs = getattr(config, "architectures", None) or []
    arch = str(archs[0]) if archs else ""
    stacks = tuple(first_weights)
    if arch.endswith(ENCODER_ONLY) and "encoder" in stacks:
        return ("encoder",)
    if arch.endswith(DECODER_ONLY) and "decoder" in stacks:
        return ("decoder",)
    if arch:
        return stacks
    names = list(keys)
    held = tuple(s for s, w in first_weights.items() if any(k == w or k.endswith("." + w) for k in names))
    return held or stacks


__all__ = ["DECODER_ONLY", "ENCODER_ONLY", "stored_stacks"]

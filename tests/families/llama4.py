"""Tiny Llama 4 variants for the generic tests (see tests/support/tiny.py): the text model (Llama4ForCausalLM)
and the multimodal model around the same text model (its vision tower not analysed). One RoPE layer
(interleaved RoPE, weightless RMS q/k norm after RoPE, chunked attention) and one NoPE layer
(temperature-tuned queries, full attention), GQA, no biases as in Llama 4's checkpoints (biases:
tests/contract/test_families_rope.py). Chunks of 4 and floor_scale 2 make the chunk mask and the temperature
act within the tests' 8- and 9-token sequences."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})
_TEXT = dict(hidden_size=16, intermediate_size=32, intermediate_size_mlp=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=4, vocab_size=64, max_position_embeddings=64, num_local_experts=1,
             no_rope_layers=[1, 0], attention_chunk_size=4, floor_scale=2, attn_scale=0.5, attention_bias=False,
             rms_norm_eps=1e-6, pad_token_id=0)
#: The multimodal model's vision tower (not analysed: its 2-D RoPE is not modelled), as small as it goes.
_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
               patch_size=8, vision_output_dim=16, projector_input_dim=16, projector_output_dim=16)

VARIANTS = {
    "llama4-text": Variant(lambda: tf.Llama4TextConfig(**_TEXT), tf.Llama4ForCausalLM, ROPE_LM),
    # Llama4ForConditionalGeneration: the same text model below language_model.model., run on token ids
    "llama4": Variant(lambda: tf.Llama4Config(text_config=_TEXT, vision_config=_VISION, image_token_index=63),
                      tf.Llama4ForConditionalGeneration, frozenset({"lm"})),
}

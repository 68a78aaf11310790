"""Tiny Mllama text-model variants for the generic tests (see tests/support/tiny.py): Llama self-attention
layers with a cross-attention layer (per-head RMS q/k norm, no RoPE) reading image states."""

import transformers as tf

from tests.support.tiny import Variant

_TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=64, max_position_embeddings=64, pad_token_id=0, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_global_layers=1, attention_heads=2,
               image_size=16, patch_size=8, max_num_tiles=1, vision_output_dim=32, intermediate_layers_indices=[0],
               supported_aspect_ratios=[[1, 1]])

VARIANTS = {
    "mllama-text": Variant(lambda: tf.MllamaTextConfig(**_TEXT, cross_attention_layers=[1]), tf.MllamaForCausalLM,
                           frozenset({"rope", "cross"})),
    # MllamaForConditionalGeneration: the same text model below model.language_model., its vision tower not read
    "mllama": Variant(lambda: tf.MllamaConfig(text_config={**_TEXT, "cross_attention_layers": [1]}, vision_config=_VISION,
                                              image_token_index=100), tf.MllamaForConditionalGeneration,
                      frozenset({"cross"})),
}

"""Tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL variants for the generic tests (see tests/support/tiny.py): the text
model of the multimodal checkpoint, run on token ids (its vision tower not analysed), with M-RoPE
sections that give each position stream its planes (equal streams for text)."""

import transformers as tf

from tests.support.tiny import Variant

_TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=64, max_position_embeddings=64, rms_norm_eps=1e-6)
#: image, video and vision-start tokens outside the test's vocabulary: token ids never ask for images
_TOKENS = dict(image_token_id=100, video_token_id=101, vision_start_token_id=102)
_V2 = dict(depth=1, embed_dim=8, hidden_size=16, num_heads=2, mlp_ratio=2, patch_size=2, spatial_merge_size=1,
           temporal_patch_size=1, in_channels=3)
_V25 = dict(depth=1, hidden_size=8, out_hidden_size=16, intermediate_size=16, num_heads=2, patch_size=2,
            spatial_merge_size=1, temporal_patch_size=1, in_channels=3, window_size=4, fullatt_block_indexes=[0])
_V3 = dict(depth=1, hidden_size=8, out_hidden_size=16, intermediate_size=16, num_heads=2, patch_size=2,
           spatial_merge_size=1, temporal_patch_size=1, in_channels=3, num_position_embeddings=4,
           deepstack_visual_indexes=[])
MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 0, 1]}

VARIANTS = {
    "qwen2-vl": Variant(lambda: tf.Qwen2VLConfig(text_config={**_TEXT, "rope_parameters": MROPE}, vision_config=_V2,
                                                 **_TOKENS), tf.Qwen2VLForConditionalGeneration, frozenset({"rope", "lm"})),
    "qwen2.5-vl": Variant(lambda: tf.Qwen2_5_VLConfig(text_config={**_TEXT, "rope_parameters": MROPE},
                                                      vision_config=_V25, **_TOKENS),
                          tf.Qwen2_5_VLForConditionalGeneration, frozenset({"rope", "lm"})),
    "qwen3-vl": Variant(lambda: tf.Qwen3VLConfig(text_config={**_TEXT, "head_dim": 4, "rope_parameters": {
        **MROPE, "mrope_interleaved": True}}, vision_config=_V3, **_TOKENS),
        tf.Qwen3VLForConditionalGeneration, frozenset({"rope", "lm"})),
}

"""Tiny CLIP and SigLIP variants for the generic tests (see tests/support/tiny.py): a text tower 16 wide with
4 heads and a vision tower 8 wide with 2 heads (8 x 8 images in 4 x 4 patches), so every per-tower
size differs; the one-tower model types read the same layouts."""

import transformers as tf

from tests.support.tiny import Variant

_TEXT = dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32, vocab_size=64,
             max_position_embeddings=16, bos_token_id=0, eos_token_id=2, pad_token_id=1)
_VISION = dict(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16, image_size=8,
               patch_size=4, num_channels=2)

VARIANTS = {
    "clip": Variant(lambda: tf.CLIPConfig(text_config=_TEXT, vision_config=_VISION, projection_dim=8),
                    tf.CLIPModel),
    "clip-vision-model": Variant(lambda: tf.CLIPVisionConfig(**_VISION), tf.CLIPVisionModel),
    "siglip": Variant(lambda: tf.SiglipConfig(text_config={**_TEXT, "projection_size": 8}, vision_config=_VISION),
                      tf.SiglipModel),
    "siglip-text-model": Variant(lambda: tf.SiglipTextConfig(**{**_TEXT, "num_hidden_layers": 1}),
                                 tf.SiglipTextModel),
}

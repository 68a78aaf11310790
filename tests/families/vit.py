"""Tiny ViT variants for the generic tests (see tests/support/tiny.py): 8 x 8 images in 4 x 4 patches (5 tokens).

``vit`` is saved as save_pretrained writes it (the original names, ``encoder.layer.i.attention.attention.query``);
tests/forms/test_vision.py saves the same models under transformers 5's names (``layers.i.attention.q_proj``).
"""

import transformers as tf

from tests.support.tiny import Variant


def _vit(**kw):
    return tf.ViTConfig(**{**dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                                  image_size=8, patch_size=4, num_channels=2, num_labels=3), **kw})


VARIANTS = {
    "vit": Variant(lambda: _vit(), tf.ViTForImageClassification),
    "vit-base-model-no-qkv-bias": Variant(lambda: _vit(num_attention_heads=2, qkv_bias=False), tf.ViTModel),
}

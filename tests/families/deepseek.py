"""Tiny DeepSeek-V2/V3 variants (multi-head latent attention) for the generic tests (see tests/support/tiny.py).

Tag ``latent``: the block is a LatentAttentionLayer; generic tests that read per-head tensors skip
these variants by that tag and name the reason, and tests/forms/test_latent.py proves them instead.
Width 16, 2 heads, n = qk_nope 4, e = qk_rope 4 (two rotary planes), v 4, latent ranks 8: 720
parameters per block with the query latent (U = 140 exact + 2 nearly null), 656 without (U = 104 + 1).
"""

import transformers as tf

from tests.support.tiny import Variant

_MLA = dict(hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=8, q_lora_rank=8, qk_nope_head_dim=4,
            qk_rope_head_dim=4, v_head_dim=4, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
            vocab_size=64, max_position_embeddings=64)
_V3 = dict(_MLA, n_group=1, topk_group=1)

LATENT_LM = frozenset({"rope", "lm", "latent"})
VARIANTS = {
    # layer 0 dense, layer 1 MoE (experts are MLPs, not read); interleaved RoPE (the V3 default)
    "deepseek-v3": Variant(lambda: tf.DeepseekV3Config(**_V3, first_k_dense_replace=1), tf.DeepseekV3ForCausalLM,
                           LATENT_LM),
    # queries straight from x, biases on q/kv_a/o, rotate_half RoPE, YaRN with mscale_all_dim in the softmax scale
    "deepseek-v3-direct-q": Variant(lambda: tf.DeepseekV3Config(**{**_V3, "q_lora_rank": None}, attention_bias=True,
                                                                rope_interleave=False, first_k_dense_replace=2,
                                                                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                                                 "factor": 4.0, "mscale": 1.0,
                                                                                 "mscale_all_dim": 1.0,
                                                                                 "original_max_position_embeddings": 16}),
                                    tf.DeepseekV3ForCausalLM, LATENT_LM),
    # MiniCPM3: DeepSeek-V2's tensors with the query latent, rotate_half RoPE (cos/sin)
    "minicpm3": Variant(lambda: tf.MiniCPM3Config(**{k: v for k, v in _MLA.items() if k not in (
        "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts")}, dim_model_base=16),
        tf.MiniCPM3ForCausalLM, LATENT_LM),
    # V2-Lite's layout (no query latent), complex-number RoPE on adjacent pairs
    "deepseek-v2": Variant(lambda: tf.DeepseekV2Config(**{**_MLA, "q_lora_rank": None}, first_k_dense_replace=2),
                           tf.DeepseekV2ForCausalLM, LATENT_LM),
}

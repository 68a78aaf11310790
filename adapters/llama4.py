"""Llama 4: refused by name (no adapter yet).

Its attention is derived and proven (docs/mathematics.md, "Normalised queries and keys"; the
Jacobian test ``test_llama4_attention_counts`` in tests/test_jacobian.py): RoPE layers normalise
queries and keys by an RMS without gains *after* RoPE (``use_qk_norm``), leaving SO(2) per plane:
G rd/2 exact QK directions and H + G nearly-null scales; NoPE layers have no norm and a
position-dependent query scale (``attn_temperature_tuning``), which leaves the full GL(d_k) gauge.
What is missing is the canonical form for the rest: the norm after RoPE (it divides out RoPE's
attention factor), the temperature scale, chunked attention (``attention_chunk_size``) and the
vision tower of ``llama4``.
"""

REFUSED = {
    "llama4": "Llama 4 (multimodal): its text attention (qk L2 norm after RoPE, NoPE layers with temperature "
              "tuning, chunked attention) is derived in docs/mathematics.md but has no adapter yet",
    "llama4_text": "Llama 4 text: qk L2 norm after RoPE, NoPE layers with temperature tuning and chunked attention "
                   "are derived in docs/mathematics.md but have no adapter yet",
}

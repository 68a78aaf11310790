"""Model types refused by name because they have no attention for the canonical form to describe,
or attention mixed with a sequence mixer the counts do not model (the registry collects ``REFUSED``
from every module; this one holds no adapter)."""

_RECURRENT = ("it has no attention layers (a state-space or recurrent sequence mixer), so there is no "
              "attention gauge to count")
_HYBRID = ("its layers mix attention with state-space or recurrent blocks; idinspect does not yet read the "
           "attention layers of hybrid models")

REFUSED = {
    **{t: _RECURRENT for t in ("mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm")},
    **{t: _HYBRID for t in ("jamba", "bamba", "zamba", "zamba2", "falcon_h1", "granitemoehybrid", "nemotron_h",
                            "recurrent_gemma", "lfm2", "lfm2_moe", "qwen3_next", "olmo_hybrid")},
    "fnet": "it mixes tokens with a Fourier transform, not attention: there is no attention gauge to count",
}

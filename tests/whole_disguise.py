"""A random element of every whole-model symmetry of a pre-RMSNorm gated decoder, applied to a
transformers model in place: written from the model's own parameters, independently of idinspect
(tests/test_export_whole_model.py, tests/test_compare_whole_model.py)."""

from __future__ import annotations

import torch


def _random_orthogonal(d: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def _signed(n: int, gen: torch.Generator) -> torch.Tensor:
    size = torch.empty(n, dtype=torch.float64).uniform_(0.5, 2.0, generator=gen)
    return size * torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)


def _regain(norm, readers, R: torch.Tensor, gen: torch.Generator) -> None:
    """The norm's gain g replaced by a random signed t and a rotation R of the stream it reads:
    each reader W -> W diag(g) R diag(1/t) (RMSNorm commutes with R only once the gain is out of the way)."""
    g = norm.weight.detach().clone()
    t = _signed(g.numel(), gen)
    for w in readers:
        w.copy_(((w * g) @ R) / t)
    norm.weight.copy_(t)


@torch.no_grad()
def disguise(model, seed: int = 1, *, permute_units: bool = False) -> None:
    """Apply, in place, a random element of every whole-model symmetry (HF orientation: y = x W^T): the
    residual rotation R (untied head only), every norm's gain changed (its readers compensating), every
    gated unit's scaling a_i (with sign), and an attention gauge move on one value/output pair; with
    ``permute_units`` the MLP units are also put in a random order."""
    gen = torch.Generator().manual_seed(seed)
    inner = model.model
    d = model.config.hidden_size
    tied = model.config.tie_word_embeddings
    R = torch.eye(d, dtype=torch.float64) if tied else _random_orthogonal(d, gen)
    inner.embed_tokens.weight.copy_(inner.embed_tokens.weight @ R)
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        _regain(layer.input_layernorm, [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], R, gen)
        _regain(layer.post_attention_layernorm, [mlp.gate_proj.weight, mlp.up_proj.weight], R, gen)
        attn.o_proj.weight.copy_(R.T @ attn.o_proj.weight)
        if attn.o_proj.bias is not None:
            attn.o_proj.bias.copy_(attn.o_proj.bias @ R)
        # an attention gauge move on the value/output pair of key/value group 0: its W_V rows * c, the
        # W_O columns of the query heads reading it / c
        c = _signed(1, gen)
        hd = attn.head_dim
        attn.v_proj.weight[:hd].mul_(c)
        if attn.v_proj.bias is not None:
            attn.v_proj.bias[:hd].mul_(c)
        groups = model.config.num_attention_heads // model.config.num_key_value_heads
        attn.o_proj.weight[:, :groups * hd].div_(c)
        f = model.config.intermediate_size
        a = _signed(f, gen)
        if permute_units:      # the units in another order: gate and up rows, down columns
            order = torch.randperm(f, generator=gen)
            for proj in (mlp.gate_proj, mlp.up_proj):
                proj.weight.copy_(proj.weight[order])
                if proj.bias is not None:
                    proj.bias.copy_(proj.bias[order])
            mlp.down_proj.weight.copy_(mlp.down_proj.weight[:, order])
        mlp.up_proj.weight.mul_(a[:, None])
        if mlp.up_proj.bias is not None:
            mlp.up_proj.bias.mul_(a)
        mlp.down_proj.weight.copy_((R.T @ mlp.down_proj.weight) / a)
        if mlp.down_proj.bias is not None:
            mlp.down_proj.bias.copy_(mlp.down_proj.bias @ R)
    if not tied:
        _regain(inner.norm, [model.lm_head.weight], R, gen)

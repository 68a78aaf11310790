"""A random element of every whole-model symmetry of a pre-RMSNorm gated decoder, applied to a
transformers model in place: written from the model's own parameters, independently of idinspect
(tests/export/test_export_whole_model.py, tests/compare/test_compare_whole_model.py)."""

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


def _units(mlp, f: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """The gated unit groups of an MLP as (up rows (f, d), down (d, f), up bias or None), views into the
    parameters: Llama's up_proj, Phi-3's second half of gate_up_proj, each of Mixtral's experts."""
    if hasattr(mlp, "up_proj"):
        return [(mlp.up_proj.weight, mlp.down_proj.weight, mlp.up_proj.bias)]
    if hasattr(mlp, "gate_up_proj"):
        return [(mlp.gate_up_proj.weight[f:], mlp.down_proj.weight, None)]
    ex = mlp.experts
    return [(ex.gate_up_proj[e, f:], ex.down_proj[e], None) for e in range(ex.gate_up_proj.shape[0])]


@torch.no_grad()
def disguise(model, seed: int = 1, *, permute_units: bool = False) -> None:
    """Apply, in place, a random element of every whole-model symmetry (HF orientation: y = x W^T): the
    residual rotation R (untied head only), every norm's gain changed (its readers compensating), every
    gated unit's scaling a_i (with sign), Mixtral's router shift (W_r + 1 v^T), and an attention gauge move
    on one value/output pair; with ``permute_units`` the MLP units (Llama's) are also put in a random order.
    Llama-shaped models, Phi-3 (fused qkv and gate_up) and Mixtral (experts, router)."""
    gen = torch.Generator().manual_seed(seed)
    inner, cfg = model.model, model.config
    d, f = cfg.hidden_size, cfg.intermediate_size
    tied = cfg.tie_word_embeddings
    R = torch.eye(d, dtype=torch.float64) if tied else _random_orthogonal(d, gen)
    inner.embed_tokens.weight.copy_(inner.embed_tokens.weight @ R)
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        fused = hasattr(attn, "qkv_proj")
        attn_readers = [attn.qkv_proj.weight] if fused else [attn.q_proj.weight, attn.k_proj.weight,
                                                              attn.v_proj.weight]
        _regain(layer.input_layernorm, attn_readers, R, gen)
        if hasattr(mlp, "gate_proj"):
            mlp_readers = [mlp.gate_proj.weight, mlp.up_proj.weight]
        elif hasattr(mlp, "gate_up_proj"):
            mlp_readers = [mlp.gate_up_proj.weight]
        else:
            mlp_readers = [mlp.gate.weight, mlp.experts.gate_up_proj]
        _regain(layer.post_attention_layernorm, mlp_readers, R, gen)
        if hasattr(mlp, "experts"):          # the router shift: every expert's logit moves by x.v
            mlp.gate.weight.add_(torch.randn(1, d, generator=gen, dtype=torch.float64))
        attn.o_proj.weight.copy_(R.T @ attn.o_proj.weight)
        if attn.o_proj.bias is not None:
            attn.o_proj.bias.copy_(attn.o_proj.bias @ R)
        # an attention gauge move on the value/output pair of key/value group 0: its W_V rows * c, the
        # W_O columns of the query heads reading it / c
        c = _signed(1, gen)
        hd = getattr(attn, "head_dim", d // cfg.num_attention_heads)
        H, G = cfg.num_attention_heads, cfg.num_key_value_heads
        v_rows = slice((H + G) * hd, (H + G + 1) * hd) if fused else slice(0, hd)
        v_weight = attn.qkv_proj.weight if fused else attn.v_proj.weight
        v_bias = None if fused else attn.v_proj.bias
        v_weight[v_rows].mul_(c)
        if v_bias is not None:
            v_bias[v_rows].mul_(c)
        attn.o_proj.weight[:, :(H // G) * hd].div_(c)
        if permute_units and hasattr(mlp, "up_proj"):      # the units in another order: gate and up rows, down columns
            order = torch.randperm(f, generator=gen)
            for proj in (mlp.gate_proj, mlp.up_proj):
                proj.weight.copy_(proj.weight[order])
                if proj.bias is not None:
                    proj.bias.copy_(proj.bias[order])
            mlp.down_proj.weight.copy_(mlp.down_proj.weight[:, order])
        for up, down, up_bias in _units(mlp, f):
            a = _signed(f, gen)
            up.mul_(a[:, None])
            if up_bias is not None:
                up_bias.mul_(a)
            down.copy_((R.T @ down) / a)
        down_bias = getattr(getattr(mlp, "down_proj", None), "bias", None)
        if down_bias is not None:
            down_bias.copy_(down_bias @ R)
    if not tied:
        _regain(inner.norm, [model.lm_head.weight], R, gen)


def _xw(module) -> torch.Tensor:
    """A projection's weight in the x W orientation (in, out): GPT-2's Conv1D as stored, nn.Linear transposed."""
    return module.weight if type(module).__name__ == "Conv1D" else module.weight.T


def _set_xw(module, w: torch.Tensor) -> None:
    module.weight.copy_(w if type(module).__name__ == "Conv1D" else w.T)


def _relayer_norm(norm, readers, gen: torch.Generator) -> None:
    """A LayerNorm's gain g and bias beta replaced by random t (signed) and beta', and each reader (W, c)
    compensating (W' = diag(g/t) W, c' = c + beta W - beta' W'), then moved along the reader's centring
    direction (W' + (1/t) c0^T, c' - (beta'.(1/t)) c0: the norm's output y' satisfies y'.(1/t) = beta'.(1/t))."""
    g, beta = norm.weight.detach().clone(), norm.bias.detach().clone()
    t = _signed(g.numel(), gen)
    beta2 = torch.randn(g.numel(), generator=gen, dtype=torch.float64)
    for module in readers:
        w, c = _xw(module).detach().clone(), module.bias.detach().clone()
        w2 = (g / t)[:, None] * w
        c2 = c + beta @ w - beta2 @ w2
        c0 = torch.randn(w.shape[1], generator=gen, dtype=torch.float64)
        w2 = w2 + (1 / t)[:, None] * c0[None, :]
        c2 = c2 - (beta2 @ (1 / t)) * c0
        _set_xw(module, w2)
        module.bias.copy_(c2)
    norm.weight.copy_(t)
    norm.bias.copy_(beta2)


def _shift_writer(module, gen: torch.Generator) -> None:
    """A writer's W + c 1^T and b + t 1 (every reader of the stream removes its mean)."""
    w = _xw(module).detach().clone()
    w = w + torch.randn(w.shape[0], 1, generator=gen, dtype=torch.float64)
    _set_xw(module, w)
    module.bias.add_(torch.randn(1, generator=gen, dtype=torch.float64))


@torch.no_grad()
def disguise_pre_ln(model, seed: int = 1) -> None:
    """Apply, in place, a random element of every exact whole-model symmetry of a pre-LayerNorm decoder with
    a tied head (GPT-2, GPTBigCode): every block norm's gain and bias changed with its readers compensating and
    moved along their centring directions, every writer shifted along the all-ones direction, each position
    row shifted, each ReLU unit scaled (a > 0), and an attention gauge move on the first head's value/output."""
    gen = torch.Generator().manual_seed(seed)
    t = model.transformer
    relu = getattr(model.config, "activation_function", "") == "relu"
    t.wpe.weight.add_(torch.randn(t.wpe.weight.shape[0], 1, generator=gen, dtype=torch.float64))
    for block in t.h:
        _relayer_norm(block.ln_1, [block.attn.c_attn], gen)
        _relayer_norm(block.ln_2, [block.mlp.c_fc], gen)
        _shift_writer(block.attn.c_proj, gen)
        _shift_writer(block.mlp.c_proj, gen)
        d, hd = model.config.n_embd, model.config.n_embd // model.config.n_head
        kv = _xw(block.attn.c_attn).shape[1] - d      # keys and values: 2d (GPT-2), 2 hd (multi-query)
        v0 = d + kv // 2                              # the first value column
        c = _signed(1, gen)
        w = _xw(block.attn.c_attn).detach().clone()
        w[:, v0:v0 + hd] *= c
        _set_xw(block.attn.c_attn, w)
        block.attn.c_attn.bias[v0:v0 + hd].mul_(c)
        rows = hd if kv == 2 * d else d               # c_proj's input rows of the query heads reading it
        w = _xw(block.attn.c_proj).detach().clone()
        w[:rows] /= c
        _set_xw(block.attn.c_proj, w)
        if relu:
            a = torch.empty(block.mlp.c_fc.bias.numel(), dtype=torch.float64).uniform_(0.5, 2.0, generator=gen)
            _set_xw(block.mlp.c_fc, _xw(block.mlp.c_fc) * a)
            block.mlp.c_fc.bias.mul_(a)
            _set_xw(block.mlp.c_proj, _xw(block.mlp.c_proj) / a[:, None])

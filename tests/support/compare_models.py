"""Models for the compare tests: a small trained Llama, disguised, fine-tuned and quantised copies.

``disguise_llama`` applies every move that keeps the function of a Llama: the norm gains folded
into the projections that read them and the residual stream rotated (x -> x R), a random gauge in
every head (one scale times rotation per RoPE plane on the QK side, a random invertible d_v x d_v
on the VO side) and a random permutation of the heads of every layer.
"""

from __future__ import annotations

import torch
import transformers as tf

#: 8 layers x 8 heads: enough heads (64) for the lineage test to resolve p < 1e-6.
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 8,
             "num_key_value_heads": 8, "head_dim": 4, "vocab_size": 96, "max_position_embeddings": 64,
             "tie_word_embeddings": False}


def small_llama(seed: int, dtype: torch.dtype = torch.float32, **overrides):
    """A freshly initialised (transformers' own init, seeded) small Llama."""
    config = tf.LlamaConfig(**{**SMALL, **overrides})
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return tf.LlamaForCausalLM(config).to(dtype)


def train(model, steps: int, lr: float, seed: int, batch: int = 4, length: int = 8, corpus_seed: int | None = None):
    """``steps`` Adam steps of next-token prediction on seeded random tokens (a fixed, learnable map:
    token t is followed by (a t + b) mod V; the map drawn from ``corpus_seed`` where given, else from
    ``seed``, which always draws the batches); returns the model in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    a, b = int(torch.randint(1, V, (1,), generator=gen)), int(torch.randint(0, V, (1,), generator=gen))
    if corpus_seed is not None:
        corpus = torch.Generator().manual_seed(corpus_seed)
        a, b = int(torch.randint(1, V, (1,), generator=corpus)), int(torch.randint(0, V, (1,), generator=corpus))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        start = torch.randint(0, V, (batch, 1), generator=gen)
        ids = [start]
        for _ in range(length - 1):
            ids.append((a * ids[-1] + b) % V)
        ids = torch.cat(ids, dim=1)
        noise = torch.rand(ids.shape, generator=gen) < 0.2
        ids = torch.where(noise, torch.randint(0, V, ids.shape, generator=gen), ids)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _random_orthogonal(n: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))[None, :]


def disguise_llama(model, seed: int = 1):
    """A float64 copy of a Llama (MHA, full RoPE, no biases) that computes the same function with
    every parameter changed: folded gains + residual rotation, per-head gauge, head permutation."""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.config
    H, dk, d = cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size
    half = dk // 2
    sd = {k: v.detach().to(torch.float64).clone() for k, v in model.state_dict().items()}
    R = _random_orthogonal(d, gen)
    sd["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"] @ R
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        g_in = sd[p + "input_layernorm.weight"]
        g_post = sd[p + "post_attention_layernorm.weight"]
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            sd[p + name + ".weight"] = sd[p + name + ".weight"] * g_in[None, :] @ R
        for name in ("mlp.gate_proj", "mlp.up_proj"):
            sd[p + name + ".weight"] = sd[p + name + ".weight"] * g_post[None, :] @ R
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            sd[p + name + ".weight"] = R.T @ sd[p + name + ".weight"]
        sd[p + "input_layernorm.weight"] = torch.ones_like(g_in)
        sd[p + "post_attention_layernorm.weight"] = torch.ones_like(g_post)
        q, k, v, o = (sd[p + f"self_attn.{n}_proj.weight"] for n in "qkvo")
        q, k, v, o = q.view(H, dk, d).clone(), k.view(H, dk, d).clone(), v.view(H, dk, d).clone(), o.view(d, H, dk).clone()
        for h in range(H):
            for plane in range(half):
                rows = [plane, plane + half]
                s = float(torch.exp(torch.randn((), generator=gen, dtype=torch.float64)))
                t = float(torch.rand((), generator=gen, dtype=torch.float64)) * 6.283185307179586
                M = s * torch.tensor([[torch.cos(torch.tensor(t)), -torch.sin(torch.tensor(t))],
                                      [torch.sin(torch.tensor(t)), torch.cos(torch.tensor(t))]], dtype=torch.float64)
                q[h, rows] = M.T @ q[h, rows]                     # Q_p -> Q_p M
                k[h, rows] = torch.linalg.inv(M) @ k[h, rows]     # K_p -> K_p M^-T
            B = torch.eye(dk, dtype=torch.float64) + 0.5 * torch.randn(dk, dk, generator=gen, dtype=torch.float64)
            v[h] = B.T @ v[h]                                     # V -> V B
            o[:, h] = o[:, h] @ torch.linalg.inv(B).T             # W_O -> B^-1 W_O
        perm = torch.randperm(H, generator=gen)
        sd[p + "self_attn.q_proj.weight"] = q[perm].reshape(H * dk, d)
        sd[p + "self_attn.k_proj.weight"] = k[perm].reshape(H * dk, d)
        sd[p + "self_attn.v_proj.weight"] = v[perm].reshape(H * dk, d)
        sd[p + "self_attn.o_proj.weight"] = o[:, perm].reshape(d, H * dk)
    g_final = sd["model.norm.weight"]
    sd["lm_head.weight"] = sd["lm_head.weight"] * g_final[None, :] @ R
    sd["model.norm.weight"] = torch.ones_like(g_final)
    out = tf.LlamaForCausalLM(cfg).to(torch.float64)
    out.load_state_dict(sd)
    return out.eval()


def quantise_int8(model):
    """A copy whose attention and MLP weights went through int8 per-row absmax quantisation and back."""
    out = type(model)(model.config).to(next(model.parameters()).dtype)
    out.load_state_dict(quantise_int8_state(model))
    return out.eval()


def disguise_bert(model, seed: int = 1):
    """A float64 copy of a BERT that computes the same function with every attention parameter
    changed: a random GL(d_k) gauge on each head's QK (biases included) and GL(d_v) on its VO, and
    a random permutation of each layer's heads. (A residual rotation does not keep a post-norm
    BERT's function: LayerNorm centres and its gain sits on the residual stream itself.)"""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.config
    H, d = cfg.num_attention_heads, cfg.hidden_size
    dk = d // H
    sd = {k: v.detach().to(torch.float64).clone() for k, v in model.state_dict().items()}
    prefix = next(k for k in sd if k.endswith("encoder.layer.0.attention.self.query.weight")).split("encoder.layer.0.")[0]
    eye = torch.eye(dk, dtype=torch.float64)
    for i in range(cfg.num_hidden_layers):
        p = f"{prefix}encoder.layer.{i}.attention."
        W = {n: sd[p + f"self.{n}.weight"].view(H, dk, d).clone() for n in ("query", "key", "value")}
        b = {n: sd[p + f"self.{n}.bias"].view(H, dk).clone() for n in ("query", "key", "value")}
        O = sd[p + "output.dense.weight"].view(d, H, dk).clone()
        for h in range(H):
            A = eye + 0.5 * torch.randn(dk, dk, generator=gen, dtype=torch.float64) / dk ** 0.5
            B = eye + 0.5 * torch.randn(dk, dk, generator=gen, dtype=torch.float64) / dk ** 0.5
            Ai, Bi = torch.linalg.inv(A), torch.linalg.inv(B)
            W["query"][h], b["query"][h] = A.T @ W["query"][h], A.T @ b["query"][h]      # W_Q A
            W["key"][h], b["key"][h] = Ai @ W["key"][h], Ai @ b["key"][h]                # W_K A^-T
            W["value"][h], b["value"][h] = B.T @ W["value"][h], B.T @ b["value"][h]      # W_V B
            O[:, h] = O[:, h] @ Bi.T                                                     # B^-1 W_O
        perm = torch.randperm(H, generator=gen)
        for n in ("query", "key", "value"):
            sd[p + f"self.{n}.weight"] = W[n][perm].reshape(H * dk, d)
            sd[p + f"self.{n}.bias"] = b[n][perm].reshape(H * dk)
        sd[p + "output.dense.weight"] = O[:, perm].reshape(d, H * dk)
    out = type(model)(cfg).to(torch.float64)
    out.load_state_dict(sd)
    return out.eval()


def quantise_int8_state(model) -> dict:
    """The state dict with every 2-d weight but embeddings through int8 per-row absmax and back."""
    sd = {}
    for k, w in model.state_dict().items():
        if w.dim() == 2 and "embed" not in k and "lm_head" not in k:
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            w = (w / scale).round().clamp(-127, 127) * scale
        sd[k] = w
    return sd


def regress(model, steps: int, lr: float, seed: int, batch: int = 2, length: int = 12):
    """``steps`` Adam steps pulling a base model's last hidden states towards seeded random targets
    on seeded random tokens (a fine-tune for models without a language-model head)."""
    gen = torch.Generator().manual_seed(seed)
    V, d = model.config.vocab_size, model.config.hidden_size
    ids = torch.randint(0, V, (batch, length), generator=gen)
    target = torch.randn(batch, length, d, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = (model(input_ids=ids).last_hidden_state - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def one_thread():
    """Context: torch on one thread (tiny matrices; the machine is shared)."""
    import contextlib

    @contextlib.contextmanager
    def scope():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
    return scope()


def llama_set(root) -> dict:
    """Saved checkpoints under ``root``: A (small Llama trained 150 Adam steps), D (A disguised,
    bf16), F (A fine-tuned 200 steps at lr 3e-4 on another token map), Q (A through int8 per-row
    absmax), C (independently initialised, trained 150 steps); ``function_error``: max |logits|
    difference of A and D in float64."""
    import copy
    from pathlib import Path

    root = Path(root)
    with one_thread():
        A = train(small_llama(0), 150, 3e-3, seed=0)
        C = train(small_llama(1), 150, 3e-3, seed=1)
        F = train(copy.deepcopy(A), 200, 3e-4, seed=7)
        D = disguise_llama(A, seed=1)
        ids = torch.randint(0, A.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            err = (copy.deepcopy(A).double()(input_ids=ids).logits - D(input_ids=ids).logits).abs().max()
        out: dict = {"function_error": float(err)}
        for name, model, dtype in (("A", A, None), ("C", C, None), ("F", F, None), ("D", D, torch.bfloat16),
                                   ("Q", quantise_int8(A), None)):
            out[name] = root / name
            (model.to(dtype) if dtype else model).save_pretrained(out[name])
    return out


def minilm_set(root, minilm_dir) -> dict:
    """Saved variants of all-MiniLM-L6-v2 under ``root``: D (head gauges and permutation, bf16),
    F (fine-tuned 12 Adam steps at lr 1e-4 towards random targets), Q (int8 per-row absmax),
    C (the same shape, freshly initialised, trained 5 steps); ``function_error`` of D in float64."""
    import copy
    from pathlib import Path

    root = Path(root)
    with one_thread():
        M = tf.BertModel.from_pretrained(minilm_dir).float().eval()
        D = disguise_bert(M, seed=3)
        ids = torch.randint(0, 1000, (2, 10), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            err = (copy.deepcopy(M).double()(input_ids=ids).last_hidden_state - D(input_ids=ids).last_hidden_state)
        out: dict = {"function_error": float(err.abs().max())}
        F = regress(copy.deepcopy(M), 12, 1e-4, seed=0)
        torch.manual_seed(5)
        C = regress(tf.BertModel(copy.deepcopy(M.config)), 5, 1e-3, seed=1)
        for name, model, dtype in (("D", D, torch.bfloat16), ("F", F, None), ("Q", quantise_int8(M), None), ("C", C, None)):
            out[name] = root / name
            (model.to(dtype) if dtype else model).save_pretrained(out[name])
    return out

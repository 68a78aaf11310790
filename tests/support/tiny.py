"""Tiny random Hugging Face models for tests, built from transformers configs and save_pretrained.

Every parameter (biases and norms included) is randomised so that zeros hide nothing.

``VARIANTS`` is the tagged registry of family variants: every entry takes part in every generic
test (equivalence with the HF attention module in float64, read/write round trip, Jacobian nullity
equal to the reported count, export logits through stock transformers, ``--prove``). Adding a
family = its adapter module + entries here (docs/adding-a-family.md). Tags select subsets:
``rope`` (RoPE frequencies compared with the model's own rotary module), ``lm`` (greedy decoding
after export), ``seq2seq`` (an encoder-decoder with a generation head: float32 export logits and
``generate`` after export), ``cross`` (has cross-attention blocks), ``latent`` (multi-head latent
attention: :func:`per_head` skips these in the tests built on the per-head form, naming why).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass(frozen=True)
class Variant:
    """One family variant: how to build its config, the model class and tags. (How far an export's
    outputs may move is not a property of the variant: idinspect.equivalence.bounds derives it.)"""

    config: Callable[[], object]
    model_class: type
    tags: frozenset[str] = field(default_factory=frozenset)
    #: Tokens per test sequence where the family needs long ones to reach every row of every table it has
    #: (MPNet's relative-position buckets need distances up to 91); None: each test's own length.
    tokens: int | None = None

    def __iter__(self):  # (config factory, model class), as the registry's entries once were
        return iter((self.config, self.model_class))

    def __getitem__(self, i: int):
        return (self.config, self.model_class)[i]


def variants(*tags: str) -> list[str]:
    """Names of the registered variants carrying every tag in ``tags`` (all of them with none)."""
    return sorted(name for name, v in VARIANTS.items() if set(tags) <= v.tags)


def per_head(names: list[str], why: str) -> list:
    """``names`` as pytest parameters, the multi-head latent attention variants (tag ``latent``) marked
    skipped with the reason ``why`` (what the test exercises that MLA does not have or that refuses it;
    tests/forms/test_latent.py proves MLA's own equivalent)."""
    import pytest

    return [pytest.param(n, marks=pytest.mark.skip(reason=f"multi-head latent attention: {why}"))
            if "latent" in VARIANTS[n].tags else n for n in names]


def _discover() -> dict[str, Variant]:
    """Every ``VARIANTS`` dict of the modules in tests/families/ (one module per family)."""
    import importlib
    import pkgutil

    from tests import families

    found: dict[str, Variant] = {}
    for info in sorted(pkgutil.iter_modules(families.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tests.families.{info.name}")
        for name, v in module.VARIANTS.items():
            if name in found:
                raise RuntimeError(f"variant {name!r} registered twice")
            found[name] = v
            FAMILY_OF[name] = info.name
    return found


#: variant -> the tests/families/ module that registers it (``pytest --family NAME`` selects by it).
FAMILY_OF: dict[str, str] = {}
VARIANTS: dict[str, Variant] = _discover()


def attn_for(cls) -> str:
    """"sdpa" where the model class supports it (exact float64 softmax), else "eager" (BLOOM)."""
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def build(variant: str, dtype: torch.dtype = torch.float64, seed: int = 0):
    """A randomised HF model of ``variant`` in ``dtype`` (eval mode, sdpa attention)."""
    v = VARIANTS[variant]
    config, cls = v.config(), v.model_class
    config._attn_implementation = attn_for(cls)
    config._experts_implementation = "eager"   # MoE grouped_mm kernels take no float64
    torch.manual_seed(seed)
    model = cls(config).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def save(model, directory: Path, max_shard_size: str | None = None, dtype: torch.dtype | None = None) -> Path:
    """save_pretrained into ``directory`` (optionally sharded / cast); returns the directory."""
    if dtype is not None:
        model = model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, **kwargs)
    return Path(directory)


def attention_modules(model, i: int):
    """(module whose input is the attention's hidden states, module whose output is W_O z + b_O) of
    attention block i, where idinspect's adapter for ``model`` says the block lives."""
    import idinspect

    src, out = idinspect.load(model).adapter.live_modules(model, i)
    return src, (out if out is not None else src)


#: Keyword names under which transformers' attention modules take the states keys and values come
#: from in a cross-attention block (BERT, GPT-2: encoder_hidden_states; BART, T5, Whisper: key_value_states).
KV_ARGUMENTS = ("encoder_hidden_states", "key_value_states", "cross_attention_states")


def model_inputs(model, input_ids: torch.Tensor, seed: int = 0) -> dict:
    """The forward arguments that run every attention block of ``model`` on ``input_ids`` [B, T].

    Decided from the model, not its family: a model whose main input is ``input_features`` (speech
    encoders) gets N(0, 1) features of the config's size and ``input_ids`` as decoder tokens; an
    encoder-decoder gets ``input_ids`` for the encoder and their reverse as decoder tokens (another
    sequence); a vision encoder gets N(0, 1) ``pixel_values`` of the config's image size, a model with
    a text and a vision tower (CLIP, SigLIP) ``input_ids`` and images; a decoder with cross-attention but no encoder of its own (``add_cross_attention``,
    or a seq2seq decoder saved alone) gets N(0, 1) encoder states of T + 3 positions.
    """
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    B, T = input_ids.shape
    main = getattr(model, "main_input_name", "input_ids")
    if main == "input_features":
        frames = 2 * cfg.max_source_positions
        return {"input_features": torch.randn(B, cfg.num_mel_bins, frames, generator=g, dtype=dtype),
                "decoder_input_ids": input_ids}
    if main == "pixel_values":
        return {"pixel_values": images(cfg, B, g, dtype)}
    if "cross_attention_states" in inspect.signature(model.forward).parameters:   # Mllama: image states
        # with every image position visible through an explicit mask: without one, sdpa would apply a causal
        # mask to the cross-attention (its module has no is_causal = False)
        vision = getattr(getattr(model, "model", model), "vision_model", None)
        if vision is not None:     # the full model: one image of one tile, its [B, T, images, tiles] mask
            width = cfg.text_config.hidden_size
            return {"input_ids": input_ids,
                    "cross_attention_states": torch.randn(B, vision.num_patches, width, generator=g, dtype=dtype),
                    "cross_attention_mask": torch.ones(B, T, 1, 1, dtype=torch.long)}
        return {"input_ids": input_ids,
                "cross_attention_states": torch.randn(B, T + 3, cfg.hidden_size, generator=g, dtype=dtype),
                "cross_attention_mask": torch.zeros(B, 1, T, T + 3, dtype=dtype)}
    if getattr(cfg, "vision_config", None) is not None:
        if getattr(cfg, "image_token_index", getattr(cfg, "image_token_id", None)) is not None:   # image tokens: text only
            return {"input_ids": input_ids}
        return {"input_ids": input_ids, "pixel_values": images(cfg.vision_config, B, g, dtype)}
    if getattr(cfg, "is_encoder_decoder", False):
        return {"input_ids": input_ids, "decoder_input_ids": input_ids.flip(-1)}
    if getattr(cfg, "add_cross_attention", False) or _decoder_saved_alone(model):
        width = getattr(cfg, "hidden_size", None) or cfg.d_model
        return {"input_ids": input_ids,
                "encoder_hidden_states": torch.randn(B, T + 3, width, generator=g, dtype=dtype)}
    return {"input_ids": input_ids}


def _decoder_saved_alone(model) -> bool:
    """A seq2seq decoder without its encoder (BartForCausalLM): cross-attention modules, no encoder."""
    names = [name for name, _ in model.named_modules()]
    return any(n.endswith(".encoder_attn") for n in names) and not any(".encoder." in f".{n}." for n in names)


def vocab(model) -> int:
    """Token ids the model takes: its vocabulary, its text tower's (CLIP, SigLIP), or 64 where it takes
    no tokens (ViT: the ids only size the batch)."""
    cfg = model.config
    text = getattr(cfg, "text_config", None)
    return int(getattr(cfg, "vocab_size", None) or getattr(text, "vocab_size", None) or 64)


def images(vision_config, batch: int, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """N(0, 1) ``pixel_values`` [batch, channels, height, width] for ``vision_config``."""
    size = vision_config.image_size
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    return torch.randn(batch, getattr(vision_config, "num_channels", 3), h, w, generator=g, dtype=dtype)


def model_output(out) -> torch.Tensor:
    """The output tensor the export tests compare: logits, else CLIP/SigLIP's image-text logits, else
    the last hidden state."""
    for name in ("logits", "logits_per_image", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    raise AttributeError(f"{type(out).__name__} has no logits or hidden states")


def capture_attention(model, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """Run ``model`` and return, per attention block, (attention input hidden states, attention output,
    the states keys and values are computed from where the block cross-attends, else None)."""
    import idinspect

    adapter = idinspect.load(model).adapter
    records: list[dict] = [dict() for _ in range(adapter.num_blocks)]
    handles = []
    for i in range(adapter.num_blocks):
        src, dst = adapter.live_modules(model, i)
        dst = dst if dst is not None else src

        def pre(module, args, kwargs, i=i):
            records[i]["x"] = (kwargs.get("hidden_states") if "hidden_states" in kwargs else args[0]).detach().clone()
            kv = next((kwargs[k] for k in KV_ARGUMENTS if kwargs.get(k) is not None), None)
            records[i]["x_kv"] = None if kv is None else kv.detach().clone()

        def post(module, args, output, i=i):
            out = output[0] if isinstance(output, tuple) else output
            records[i]["y"] = out.detach().clone()

        handles.append(src.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(dst.register_forward_hook(post))
    from idinspect.numerics.twin import exact_softmax

    try:
        with torch.no_grad(), exact_softmax(), adapter.exact_float64():
            model(**model_inputs(model, input_ids))
    finally:
        for h in handles:
            h.remove()
    return [(r["x"], r["y"], r["x_kv"]) for r in records]


def float64_layer(layer):
    """A canonical layer with every tensor cast to float64 (the reference the analyzer's lean,
    stored-dtype path is compared with)."""
    return layer.replace(**{role: t.to(torch.float64) for role, t in layer.tensors().items()})

"""GGUF files (llama.cpp) as a :class:`TensorReader` under the Hugging Face names the adapters expect.

Metadata and tensors are read with the ``gguf`` package (``pip install 'idinspect[gguf]'``):
``GGUFReader`` memory-maps the file, and only the tensors an adapter asks for are decoded
(``gguf.quants.dequantize`` for quantised types, so an inspection dequantises the attention
tensors only). The file's ``general.architecture`` picks a family; its metadata becomes the
config.json the adapter reads (:func:`synthesised_config`), and its tensor names
(``blk.N.attn_q.weight``, ...) map back to the transformers names (``model.layers.N.self_attn.
q_proj.weight``, ``h.N.attn.c_attn.weight``, ...).

llama.cpp's converter reorders the rows of Q and K (and their biases) for the architectures it
runs with "normal" (interleaved-pair) rotary embeddings, so that its kernel rotating adjacent
pairs computes what transformers' half-split rotation computes: per head, rows ``(s, j)`` (half
``s``, index ``j``) are stored at ``(j, s)``. This reader undoes it for those architectures
(``llama``, ``mistral``, ``granite``) and leaves the rows alone for the "neox" ones (``qwen2``,
``qwen3``, ``phi3``, ``gemma3``), which llama.cpp rotates half-split as transformers does. GPT-2's
``c_attn``/``c_proj`` are stored transposed (Linear layout) and are transposed back to Conv1D.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import IdinspectError, one_line
from ..textsafe import visible
from .checkpoint import TensorReader
from .file_names import CONFIG_FILE

GGUF_SUFFIX = ".gguf"


@dataclass(frozen=True)
class Family:
    """How one GGUF architecture maps onto a transformers model type."""

    model_type: str
    architecture: str      # transformers class name recorded as config.architectures
    rope: str | None       # 'normal' (llama.cpp permutes Q/K rows), 'neox' (it does not), None (no RoPE)
    layer: str             # HF prefix of layer i, with {i}
    names: dict[str, str]  # GGUF suffix after 'blk.{i}.' -> HF suffix after the layer prefix
    norm_shift: float = 0.0  # llama.cpp stores every '*norm.weight' as w + norm_shift (Gemma's 1 + w gains)


_LLAMA_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "post_attention_norm": "post_attention_layernorm", "ffn_post_norm": "post_feedforward_layernorm",
    "ffn_pre_norm": "pre_feedforward_layernorm",
}
#: Phi-3: llama.cpp keeps the fused [Q | K | V] and [gate | up] projections as attn_qkv / ffn_up.
_PHI3_NAMES = {**_LLAMA_NAMES, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
#: Gemma 2/3: four norms per block (llama.cpp's ffn_norm is Gemma's pre-feedforward norm).
_GEMMA_NAMES = {**_LLAMA_NAMES, "ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                "ffn_post_norm": "post_feedforward_layernorm"}
_GPT2_NAMES = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "attn_norm": "ln_1", "ffn_norm": "ln_2",
               "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}

#: GGUF ``general.architecture`` -> family. Others are refused by name.
FAMILIES: dict[str, Family] = {
    "llama": Family("llama", "LlamaForCausalLM", "normal", "model.layers.{i}", _LLAMA_NAMES),
    "mistral": Family("mistral", "MistralForCausalLM", "normal", "model.layers.{i}", _LLAMA_NAMES),
    "granite": Family("granite", "GraniteForCausalLM", "normal", "model.layers.{i}", _LLAMA_NAMES),
    "qwen2": Family("qwen2", "Qwen2ForCausalLM", "neox", "model.layers.{i}", _LLAMA_NAMES),
    "qwen3": Family("qwen3", "Qwen3ForCausalLM", "neox", "model.layers.{i}", _LLAMA_NAMES),
    "phi3": Family("phi3", "Phi3ForCausalLM", "neox", "model.layers.{i}", _PHI3_NAMES),
    "gemma3": Family("gemma3_text", "Gemma3ForCausalLM", "neox", "model.layers.{i}", _GEMMA_NAMES, norm_shift=1.0),
    "gpt2": Family("gpt2", "GPT2LMHeadModel", None, "transformer.h.{i}", _GPT2_NAMES),
}
_GLOBAL_NAMES = {
    "llama": {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"},
    "gpt2": {"token_embd": "transformer.wte", "position_embd": "transformer.wpe", "output_norm": "transformer.ln_f",
             "output": "lm_head"},
}
#: Tensors llama.cpp writes for what transformers keeps in config.json (RoPE frequency factors): read
#: into the synthesised config, not parameters of the model.
CONFIG_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight", "rope_freqs.weight")
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)\.(weight|bias)$")
_FLOAT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def _gguf():
    try:
        import gguf
    except ImportError:
        raise IdinspectError("reading GGUF files needs the gguf package: pip install 'idinspect[gguf]'") from None
    return gguf


class GGUFCheckpoint(TensorReader):
    """Tensors of one GGUF file under transformers names; quantised tensors are dequantised to float32
    when read (``dtype`` reports float32 for them; :attr:`tensor_types` keeps the stored type).

    ``ensure``: called with a tensor's byte range ``(start, end)`` before its data is read (a file read
    in part, :mod:`.remote_gguf`, fetches what it does not hold yet). ``supported``: the model types
    adapters exist for (the registry, passed in: sources never import adapters)."""

    def __init__(self, path: str | Path, ensure: Callable[[int, int], None] | None = None,
                 supported: Collection[str] = ()):
        from .gguf_header import check_file
        from .validate import os_reason

        gguf = _gguf()
        self.path = Path(path)
        self._ensure = ensure
        try:
            self.header = check_file(self.path)    # counts, sizes and offsets against the file, before parsing
            self._file = gguf.GGUFReader(str(self.path), "r")
        except OSError as exc:
            raise IdinspectError(f"{self.path}: {os_reason(exc)}") from None
        except (ValueError, KeyError, IndexError, OverflowError, MemoryError, UnicodeDecodeError,
                RecursionError) as exc:
            raise IdinspectError(f"{self.path}: not a readable GGUF file ({visible(one_line(exc))}); "
                                 "re-download or convert it again") from None
        self.gguf_architecture = str(self._field("general.architecture", ""))
        family = FAMILIES.get(self.gguf_architecture)
        if family is None:
            raise IdinspectError(f"{self.path}: GGUF architecture {self.gguf_architecture!r} is not supported "
                                 f"(supported: {', '.join(sorted(FAMILIES))})")
        self.family = family
        if family.model_type not in supported:
            raise IdinspectError(f"{self.path}: GGUF architecture {self.gguf_architecture!r} maps to model_type "
                                 f"{family.model_type!r}, which this idinspect has no adapter for "
                                 f"(supported: {', '.join(sorted(supported))})")
        self._tensors = {}
        self._hf_to_gguf: dict[str, str] = {}
        global_names = _GLOBAL_NAMES["gpt2" if family.model_type == "gpt2" else "llama"]
        self._config_tensors = {t.name: t for t in self._file.tensors if t.name in CONFIG_TENSORS}
        for t in self._file.tensors:
            if t.name in CONFIG_TENSORS:
                continue
            hf = self._hf_name(t.name, global_names)
            self._tensors[hf] = t
            self._hf_to_gguf[hf] = t.name
        #: HF name -> stored GGML type name ('F32', 'F16', 'Q8_0', ...).
        self.tensor_types = {n: t.tensor_type.name for n, t in self._tensors.items()}
        self.shard_files = [self.path.name]

    # names ----------------------------------------------------------------------------------
    def _hf_name(self, name: str, global_names: dict[str, str]) -> str:
        m = _BLOCK.match(name)
        if m:
            i, part, kind = m.groups()
            hf = self.family.names.get(part)
            if hf is not None:
                return f"{self.family.layer.format(i=i)}.{hf}.{kind}"
            return name
        stem, _, kind = name.rpartition(".")
        hf = global_names.get(stem)
        return f"{hf}.{kind}" if hf is not None else name

    def gguf_name(self, name: str) -> str | None:
        return self._hf_to_gguf.get(name)

    def _field(self, key: str, default=None):
        field = self._file.fields.get(key)
        if field is None:
            return default
        value = field.contents()
        return value

    def metadata(self, key: str, default=None):
        """``{architecture}.{key}`` (e.g. ``block_count``), else ``default``."""
        return self._field(f"{self.gguf_architecture}.{key}", default)

    # TensorReader -------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return sorted(self._tensors)

    def _tensor(self, name: str):
        try:
            return self._tensors[name]
        except KeyError:
            raise IdinspectError(f"{self.path}: no tensor named {name}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        shape = tuple(int(s) for s in reversed(self._tensor(name).shape.tolist()))   # GGUF lists ne[0] first
        if self._transposed(name):
            shape = shape[::-1]
        return shape

    def dtype(self, name: str) -> torch.dtype:
        return _FLOAT.get(self._tensor(name).tensor_type.name, torch.float32)

    def file_of(self, name: str) -> str | None:
        return self.path.name if name in self._tensors else None

    def config_tensor(self, name: str) -> list[float] | None:
        """A tensor of :data:`CONFIG_TENSORS` by GGUF name, as a list (None if the file has none)."""
        t = self._config_tensors.get(name)
        return None if t is None else self._decode(t).reshape(-1).tolist()

    def get(self, name: str) -> torch.Tensor:
        """The tensor as transformers stores it: dequantised, Q/K rows un-permuted, GPT-2 Conv1D layout,
        Gemma's norm weights shifted back (llama.cpp stores 1 + w; float32 (1 + w) - 1 is w exactly
        where 1 + w is in [0.5, 2^24], else within 2^-24 of the gain)."""
        t = self._tensor(name)
        out = self._unpermute(name, self._decode(t))
        if self.family.norm_shift and t.name.endswith("norm.weight"):
            out = out.to(torch.float32) - self.family.norm_shift
        if self._transposed(name):
            out = out.T
        return out.contiguous()

    def _decode(self, t) -> torch.Tensor:
        """A GGUF tensor's values in its stored layout (quantised types dequantised to float32)."""
        gguf = _gguf()
        if self._ensure is not None:
            self._ensure(int(t.data_offset), int(t.data_offset) + int(t.n_bytes))
        stored = tuple(int(s) for s in reversed(t.shape.tolist()))
        kind = t.tensor_type.name
        if kind == "BF16":    # GGUFReader hands BF16 out as raw bytes
            out = torch.from_numpy(np.array(t.data).view(np.uint16).reshape(stored)).view(torch.bfloat16)
        elif kind in _FLOAT:
            out = torch.from_numpy(np.array(t.data).reshape(stored))
        else:
            try:
                array = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            except NotImplementedError:
                raise IdinspectError(f"{self.path}: tensor {t.name} is {kind}, which the gguf package cannot "
                                     "dequantise; convert the file to another quantisation") from None
            out = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).reshape(stored)
        return out

    def _transposed(self, name: str) -> bool:
        return self.family.model_type == "gpt2" and name.endswith(("attn.c_attn.weight", "attn.c_proj.weight",
                                                                  "mlp.c_fc.weight", "mlp.c_proj.weight"))

    def _unpermute(self, name: str, w: torch.Tensor) -> torch.Tensor:
        """Undo llama.cpp's ``permute``: rows (h, j, s) back to (h, s, j) for 'normal' rotary families."""
        if self.family.rope != "normal":
            return w
        md = _Checked(self)
        if name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            n = md.count("attention.head_count")
        elif name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            n = md.count("attention.head_count_kv", md.count("attention.head_count"))
        else:
            return w
        rows = w.shape[0]
        return w.reshape(n, rows // n // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)

    def close(self) -> None:
        self._tensors.clear()
        self._file = None


def synthesised_config(reader: GGUFCheckpoint) -> dict:
    """The config.json settings of the GGUF's metadata, for the adapter of its family."""
    f = reader.family
    md = _Checked(reader)
    heads = md.count("attention.head_count", hi=1 << 16)
    kv = md.count("attention.head_count_kv", heads, hi=heads)
    layers = md.count("block_count", hi=max(1, len(reader.header.tensors)))
    hidden = md.count("embedding_length", hi=1 << 24)
    if f.model_type == "gpt2":
        return {"model_type": "gpt2", "architectures": [f.architecture], "n_embd": hidden,
                "n_layer": layers, "n_head": heads, "n_positions": md.count("context_length", 1024),
                "layer_norm_epsilon": _decimal(md.number("attention.layer_norm_epsilon", 1e-5)),
                "vocab_size": _vocab(reader)}
    head_dim = md.count("attention.key_length", max(1, hidden // heads), hi=1 << 20)
    cfg = {"model_type": f.model_type, "architectures": [f.architecture], "hidden_size": hidden,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
           "head_dim": head_dim, "intermediate_size": md.count("feed_forward_length", 4 * hidden),
           "max_position_embeddings": md.count("context_length", 4096),
           "rms_norm_eps": _decimal(md.number("attention.layer_norm_rms_epsilon", 1e-6)),
           "rope_theta": _decimal(md.number("rope.freq_base", 10000.0)), "vocab_size": _vocab(reader),
           "tie_word_embeddings": "lm_head.weight" not in reader}
    if f.model_type in ("llama", "mistral", "granite", "qwen3", "gemma3_text"):
        cfg["attention_bias"] = "model.layers.0.self_attn.q_proj.bias" in reader
    if f.model_type == "granite":     # llama.cpp's GraniteModel: the *_multiplier settings as *_scale keys
        for key, name in (("attention.scale", "attention_multiplier"), ("embedding_scale", "embedding_multiplier"),
                          ("residual_scale", "residual_multiplier"), ("logit_scale", "logits_scaling")):
            if md(key) is not None:
                cfg[name] = _decimal(md.number(key, 1.0))
    scaling = md("rope.scaling.type")
    factor = md.number("rope.scaling.factor", 1.0) if md("rope.scaling.factor") is not None else None
    if scaling in ("linear", "yarn") and factor:
        cfg["rope_scaling"] = {"rope_type": scaling, "factor": _decimal(factor)}
        if scaling == "yarn":
            cfg["rope_scaling"]["original_max_position_embeddings"] = md.count("rope.scaling.original_context_length",
                                                                                    cfg["max_position_embeddings"])
    window = md.count("attention.sliding_window", 0, lo=0)
    if window:
        cfg["sliding_window"] = window
    rotary = md.count("rope.dimension_count", 0, lo=0, hi=head_dim)
    if rotary and rotary != head_dim:
        cfg["partial_rotary_factor"] = rotary / head_dim
    if f.model_type == "phi3":
        cfg.update(_phi3_rope(reader, cfg))
    if f.model_type == "gemma3_text":
        cfg.update(_gemma3_layers(reader, cfg))
    return cfg


#: What llama.cpp's Gemma 3 loader fixes rather than reads (``llama-model.cpp``): every sixth layer
#: full attention, the rest sliding; the sliding layers' RoPE base.
GEMMA3_SWA_PATTERN = 6
GEMMA3_SWA_ROPE_BASE = 10000.0


def _gemma3_layers(reader: GGUFCheckpoint, cfg: dict) -> dict:
    """Gemma 3's layer types, RoPE per layer type and score scale, as llama.cpp runs the file: a
    ``attention.sliding_window_pattern`` key if present (a period or one flag per layer), else every
    sixth layer full; sliding layers at ``rope.freq_base_swa`` (else 10000) unscaled, full layers at
    ``rope.freq_base`` with the file's linear scaling; scale (head_dim)^-1/2, or (d / H)^-1/2 for the
    62-layer 27B, which is what query_pre_attn_scalar states in Google's configs."""
    n = cfg["num_hidden_layers"]
    pattern = reader.metadata("attention.sliding_window_pattern", GEMMA3_SWA_PATTERN)
    if isinstance(pattern, list):
        types = ["sliding_attention" if bool(p) else "full_attention" for p in pattern][:n]
    else:
        period = _Checked(reader).count("attention.sliding_window_pattern", GEMMA3_SWA_PATTERN)
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
    full = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
    scaling = cfg.pop("rope_scaling", None)
    if scaling is not None and scaling["rope_type"] == "linear":
        full = {**full, "rope_type": "linear", "factor": scaling["factor"]}
    sliding = {"rope_type": "default",
               "rope_theta": _decimal(_Checked(reader).number("rope.freq_base_swa", GEMMA3_SWA_ROPE_BASE))}
    scalar = cfg["hidden_size"] // cfg["num_attention_heads"] if n == 62 else cfg["head_dim"]
    return {"layer_types": types, "rope_parameters": {"sliding_attention": sliding, "full_attention": full},
            "query_pre_attn_scalar": scalar}


def _phi3_rope(reader: GGUFCheckpoint, cfg: dict) -> dict:
    """Phi-3's original context length, and its longrope factors, which llama.cpp stores as the
    tensors ``rope_factors_long`` / ``rope_factors_short`` (one factor per rotary plane)."""
    original = _Checked(reader).count("rope.scaling.original_context_length", 0, lo=0)
    out = {"original_max_position_embeddings": original} if original else {}
    long, short = reader.config_tensor("rope_factors_long.weight"), reader.config_tensor("rope_factors_short.weight")
    if long is not None or short is not None:
        if long is None or short is None:
            raise IdinspectError(f"{reader.path}: a Phi-3 GGUF with longrope needs both rope_factors_long and "
                                 "rope_factors_short tensors; convert the file again")
        factors = {"long_factor": long, "short_factor": short}
        if not original:
            raise IdinspectError(f"{reader.path}: a Phi-3 GGUF with longrope factors needs "
                                 f"{reader.gguf_architecture}.rope.scaling.original_context_length; convert the file again")
        out["rope_scaling"] = {"rope_type": "longrope", **factors}
    return out


_REQUIRED = object()


class _Checked:
    """The GGUF's metadata as :func:`synthesised_config` reads it, each value checked for its type and
    range first (one-line errors naming the file and the key): counts are integers (one per layer
    only if all equal), numbers finite, the layer count no more than the tensors the file lists."""

    def __init__(self, reader: GGUFCheckpoint):
        self.reader = reader

    def __call__(self, key: str, default=None):
        return self.reader.metadata(key, default)

    def _bad(self, key: str, value, wanted: str) -> IdinspectError:
        shown = visible(repr(value if not isinstance(value, list) else value[:4]))[:60]
        return IdinspectError(f"{self.reader.path}: GGUF metadata {self.reader.gguf_architecture}.{key} is {shown}, "
                              f"not {wanted}; convert the file again")

    def count(self, key: str, default=_REQUIRED, lo: int = 1, hi: int = 1 << 31) -> int:
        value = self.reader.metadata(key, None)
        if value is None:
            if default is _REQUIRED:
                raise IdinspectError(f"{self.reader.path}: no {self.reader.gguf_architecture}.{key} in the GGUF "
                                     "metadata; convert the file again")
            return default
        if isinstance(value, list):
            if not value or any(v != value[0] for v in value):
                raise self._bad(key, value, "one count for every layer (per-layer values are not supported)")
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
            raise self._bad(key, value, f"an integer from {lo} to {hi}")
        return int(value)

    def number(self, key: str, default: float) -> float:
        value = self.reader.metadata(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(value)) or float(value) <= 0:
            raise self._bad(key, value, "a positive finite number")
        return float(value)


def _decimal(value) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-06, not
    9.99999997e-07): GGUF stores config floats in float32, config.json held the decimal."""
    return float(str(np.float32(value)))


def _vocab(reader: GGUFCheckpoint) -> int:
    for name in ("model.embed_tokens.weight", "transformer.wte.weight"):
        if name in reader:
            return int(reader.shape(name)[0])
    return int(reader.metadata("vocab_size", 0) or 0)


def open_gguf(path: Path, supported: Collection[str], ensure: Callable[[int, int], None] | None = None,
              ) -> tuple[Path, GGUFCheckpoint, tempfile.TemporaryDirectory]:
    """(folder holding the synthesised config.json, reader, the folder's owner): the folder lives as
    long as the returned TemporaryDirectory (the Model keeps it). ``ensure``, ``supported``: see
    :class:`GGUFCheckpoint`."""
    reader = GGUFCheckpoint(path, ensure, supported)
    folder = tempfile.TemporaryDirectory(prefix="idinspect-gguf-")
    (Path(folder.name) / CONFIG_FILE).write_text(json.dumps(synthesised_config(reader), indent=1))
    return Path(folder.name), reader, folder


__all__ = ["FAMILIES", "GGUFCheckpoint", "GGUF_SUFFIX", "open_gguf", "synthesised_config"]

"""What every adapter shares: finding the layer prefix, checked tensor reads, Linear layouts.

An adapter knows tensor names, orientation, fusion and prefixes, and nothing about mathematics.
Layout helpers here only slice, transpose and reshape, so read -> write is bit-exact.
"""

from __future__ import annotations

import re
from typing import ClassVar

import torch

from ..layer.attention_layer import AttentionLayer, Positional
from ..sources.checkpoint import TensorReader
from ..sources.config import ConfigSpec
from ..errors import IdinspectError


class Adapter:
    """Maps one architecture family's checkpoint tensors to :class:`AttentionLayer` and back.

    Subclasses set ``configs`` (a :class:`ConfigSpec` per ``model_type`` handled),
    ``layer_container`` (e.g. ``"encoder.layer"``) and ``probe_suffix`` (a tensor every layer has,
    relative to the layer) and implement
    :meth:`read_layer`, :meth:`write_layer` and :meth:`attention_keys`.
    """

    family: ClassVar[str]
    configs: ClassVar[dict[str, ConfigSpec]]
    layer_container: ClassVar[str]
    probe_suffix: ClassVar[str]
    #: Suffixes of stored tensors that are buffers, not parameters (never counted, never biases).
    buffer_suffixes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config, reader: TensorReader):
        self.config = config
        self.reader = reader
        self.prefix = self._find_prefix(reader.keys())
        self._positional: Positional | None = None

    # names ------------------------------------------------------------------
    def _find_prefix(self, keys: list[str]) -> str:
        """The part before the layer container: '' for base-model saves, 'bert.' etc. for task models."""
        pattern = re.compile(r"^((?:.+\.)?)" + re.escape(f"{self.layer_container}.0.{self.probe_suffix}") + "$")
        prefixes = sorted({m.group(1) for k in keys if (m := pattern.match(k))}, key=len)
        if not prefixes:
            raise IdinspectError(
                f"no tensor named '*{self.layer_container}.0.{self.probe_suffix}' in the checkpoint; "
                f"config.json says model_type '{self.config.model_type}': check that the weights belong to this config")
        return prefixes[0]

    def key(self, layer: int, suffix: str) -> str:
        return f"{self.prefix}{self.layer_container}.{layer}.{suffix}"

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    # shape facts for the summary ------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    @property
    def architecture(self) -> str:
        archs = getattr(self.config, "architectures", None) or []
        return archs[0] if archs else self.configs[self.config.model_type].class_name.replace("Config", "Model")

    def positional(self) -> Positional:
        if self._positional is None:
            self._positional = self._make_positional()
        return self._positional

    def _make_positional(self) -> Positional:
        return Positional("absolute")

    def is_buffer(self, key: str) -> bool:
        return any(key.endswith(s) for s in self.buffer_suffixes)

    # reading and writing ----------------------------------------------------------
    def read_layer(self, i: int) -> AttentionLayer:
        raise NotImplementedError

    def write_layer(self, layer: AttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Tensors under their checkpoint names, orientation and fusion.

        ``dtype=None`` keeps each tensor's checkpoint dtype; otherwise everything is cast to ``dtype``.
        """
        raise NotImplementedError

    def attention_keys(self, i: int) -> list[str]:
        """Every checkpoint tensor that :meth:`write_layer` produces for layer ``i``."""
        raise NotImplementedError

    def _load(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """Read ``name``, checking its shape against what the config implies."""
        if name not in self.reader:
            raise IdinspectError(f"tensor {name} is missing from the checkpoint (config.json implies it); "
                                 "the checkpoint is incomplete or does not match its config")
        got = self.reader.shape(name)
        if tuple(got) != tuple(shape):
            raise IdinspectError(f"tensor {name} has shape {list(got)} but config.json implies {list(shape)}; "
                                 "the checkpoint does not match its config")
        return self.reader.get(name)

    def _cast(self, name: str, t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        target = dtype if dtype is not None else self.reader.dtype(name)
        return t.to(target).contiguous()


# Linear layouts: nn.Linear stores weight [out, in] and computes y = x W^T + b. ------------------

def heads_from_linear_rows(weight: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """weight [n*head_dim, d] -> [n, d, head_dim], head h = weight[h*hd:(h+1)*hd, :].T."""
    return weight.reshape(n, head_dim, weight.shape[1]).transpose(1, 2)


def linear_rows_from_heads(W: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_from_linear_rows`: [n, d, hd] -> [n*hd, d]."""
    n, d, hd = W.shape
    return W.transpose(1, 2).reshape(n * hd, d)


def heads_from_linear_cols(weight: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """Output projection weight [d, n*hd] -> W_O [n, hd, d], head h = weight[:, h*hd:(h+1)*hd].T."""
    return weight.T.reshape(n, head_dim, weight.shape[0])


def linear_cols_from_heads(W_O: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_from_linear_cols`: [n, hd, d] -> [d, n*hd]."""
    n, hd, d = W_O.shape
    return W_O.reshape(n * hd, d).T


def heads_from_bias(bias: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """bias [n*hd] -> [n, hd]."""
    return bias.reshape(n, head_dim)

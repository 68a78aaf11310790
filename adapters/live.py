"""What an adapter says about a live transformers model of its family: where each attention block's
modules are, what a forward pass needs, and how --prove's twin is configured. ``--prove``
(:mod:`idinspect.numerics.twin`) and the tests' oracles use it; reading and writing checkpoints
(:mod:`.base`) does not. Layout facts only, no mathematics.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch

from ..errors import IdinspectError
from .example_inputs import example_inputs


class LiveModel:
    """The live-model half of :class:`~.base.Adapter` (which supplies ``family``, ``prefix`` and ``sites``)."""

    #: Attention module of the twin and test models: ``(module, output module or None)``, relative
    #: to the layer, for each block kind (the module takes the hidden states; a separate output
    #: module, as BERT's ``attention.output.dense``, is applied to its output).
    hf_modules: ClassVar[dict[str, tuple[str, str | None]]] = {}
    #: A table of the model's that a block reads through its call (MPNet's relative-position bias,
    #: looked up once by the encoder): per block kind, (its ``nn.Embedding`` module below the prefix,
    #: the keyword of the attention call that carries the looked-up values). The block of layer 0 owns
    #: it: --prove and the tests differentiate its call with respect to the table too.
    hf_shared_tables: ClassVar[dict[str, tuple[str, str]]] = {}
    #: Tokens per sequence of --prove's twin (and the least the test variants run): enough to reach
    #: every row of every table the family has.
    twin_tokens: ClassVar[int] = 8

    @property
    def twin_class(self) -> str | None:
        """The transformers class the twin is built as, where the base model (AutoModel) would hold
        stacks this checkpoint has not (``T5EncoderModel``); None: AutoModel's."""
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict[str, Any]:
        """config keyword arguments of a one-layer twin of ``shape`` (heads, kv_heads, head_dim,
        hidden_size) with this model's bias pattern, positional scheme and causality (see
        :mod:`idinspect.numerics.twin`)."""
        raise IdinspectError(f"--prove has no twin recipe for the {self.family} family")

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """A context in which this family's transformers modules compute float64 inputs in float64
        (some cast to float32 inside: a rotary embedding, a norm); the proofs run in it. None by default."""
        return contextlib.nullcontext()

    def shared_table(self, n: int) -> tuple[str, str] | None:
        """(module path from the model's root, call keyword) of the model-level table block ``n`` owns
        (:attr:`hf_shared_tables`), else None."""
        site = self.sites[n]
        found = self.hf_shared_tables.get(site.block.kind)
        if found is None or site.layer != 0:
            return None
        return f"{self.prefix}{found[0]}", found[1]

    #: Keyword names under which transformers' attention modules take a cross block's key/value states.
    kv_arguments: ClassVar[tuple[str, ...]] = ("encoder_hidden_states", "key_value_states")

    def example_inputs(self, hf_model, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Forward arguments that run every attention block of ``hf_model`` (see :func:`example_inputs`)."""
        return example_inputs(hf_model, input_ids, generator)

    def example_call(self, hf_model, generator: torch.Generator) -> contextlib.AbstractContextManager:
        """A context around a forward pass of ``hf_model`` on :meth:`example_inputs` that gives inner
        modules the inputs the whole model cannot pass them (an inferred adapter's tower traced as a model
        of its own: its cross-attention states, given at its root). None by default."""
        return contextlib.nullcontext()

    def live_modules(self, hf_model, n: int):
        """(module taking the hidden states, separate output module or None) of block ``n`` in a live
        transformers model of this checkpoint."""
        site = self.sites[n]
        layer = hf_model.get_submodule(f"{self.prefix}{site.path}".rstrip("."))
        module, output = self.hf_modules[site.block.kind]
        return layer.get_submodule(module), (layer.get_submodule(output) if output else None)


__all__ = ["LiveModel"]

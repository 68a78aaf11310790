"""The :class:`Form` protocol: what an attention form (the per-head form, multi-head latent attention, a
third one) gives every stage of idinspect.

A layer knows its form (the class attribute ``form``, e.g. ``AttentionLayer.form == "per_head"``), and
so does an adapter (``Adapter.form``) and an open model (``Model.form``); :func:`idinspect.forms.form_of`
maps that name to the form's implementation. The stages (analysis, ``--prove``, gauge check, export,
verify, the reference forward) call these methods and never ask which form they hold.

A layer object of any form provides ``index``, ``dtype``, ``tensors()`` (role -> tensor),
``tensor_names`` (role -> checkpoint name), ``to(dtype)``, ``replace(**tensors)`` and
``parameter_count()``; the form provides the mathematics below (docs/mathematics.md, "Adding a
third form", says what each must satisfy).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

#: Needs a stage may name in :meth:`Form.refusal`.
NEEDS = ("per-head invariants", "check_adapter")


class Form(Protocol):
    #: The name layers and adapters carry (``"per_head"``, ``"latent"``).
    name: str
    #: What error messages call it ("per-head attention", "multi-head latent attention").
    title: str
    #: The gauge-fixed form an export writes, and its version (``balanced`` 1, ``balanced-latent`` 1).
    gauge_name: str
    gauge_version: int

    def analyze(self, layer: Any, *, device: str | torch.device | None = "cpu", spectra: bool = True,
                scratch: Any = None, heavy_tails: bool = False) -> tuple[dict, list[dict]]:
        """(layer object of the JSON contract, findings): the counts P, U (its qk/vo/... parts), the
        closed form, and the findings; raises UnsupportedLayerError for what the counts do not model."""

    def unidentified(self, layer: Any) -> int:
        """The structural count U of ``layer``: the dimension of its gauge orbit."""

    def reference(self, layer: Any, x: torch.Tensor, positions: torch.Tensor | None = None,
                  causal: bool | None = None, x_kv: torch.Tensor | None = None) -> torch.Tensor:
        """The attention output [B, T, d] for hidden states ``x`` [B, T, d], in float64."""

    def canonicalize(self, layer: Any, **options: Any) -> tuple[Any, Any]:
        """(the layer in the gauge-fixed form, in float64; the form's report of where it is not unique)."""

    def invariant_change(self, a: Any, b: Any) -> Any:
        """The largest relative change of what the gauge leaves invariant, from ``a`` to ``b``
        (an :class:`~idinspect.forms.per_head.invariants.InvariantError`)."""

    def gauge_residuals(self, layer: Any) -> list[tuple[float, str]]:
        """(relative residual, where) of every condition that defines the gauge-fixed form."""

    def fix(self, layer: Any, target: torch.dtype | None, workspace: Any = None) -> Any:
        """The export's :class:`~idinspect.forms.per_head.export.FixedLayer`: the fixed form cast once
        to ``target`` (or the stored dtype), with the change that cast made."""

    def prove(self, model: Any, seed: int = 0) -> dict:
        """The ``proof`` object of ``--prove``: the structural count against a twin's Jacobian nullity."""

    def tensors(self, layer: Any) -> dict[str, torch.Tensor]:
        """Role -> tensor of the layer (what is read, fixed and written)."""

    def refusal(self, need: str) -> str | None:
        """None when the form provides ``need`` (one of :data:`NEEDS`), else why not (one line)."""

"""``export --whole-model``: which stored tensor plays which role in the whole-model gauge fix, as data.

The mathematics (fold the norm gains, rotate the residual stream, balance the gated units) is
:mod:`idinspect.gauge.whole_model_fix`; here each stored tensor of a pre-RMSNorm gated checkpoint
is given its role by name, and :class:`WholeModelReader` serves the transformed tensors (float64)
in place of the stored ones, so that the export pipeline gauge-fixes the attention of the
transformed model and writes every transformed tensor in its stored dtype. A stored tensor that
no role names refuses the export by name: no tensor is ever left behind in the old basis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..analysis.whole_model import PRE_RMS_GATED
from ..analysis.whole_model_read import FORM_BY_TYPE, NAMES, stored_key, why_not_derived
from ..errors import IdinspectError
from ..gauge.whole_model_fix import (
    WHOLE_GAUGE_NAME,
    WHOLE_GAUGE_VERSION,
    ResidualRotation,
    centre_columns,
    divide_columns,
    fold_norm_gain,
    gated_unit_scalings,
    residual_rotation,
    scale_rows,
)
from ..sources.checkpoint import ViewReader

#: The model types whose stored layout the roles below (pre-RMSNorm gated: separate or fused gate/up,
#: Mixtral's experts) or those of :mod:`.whole_model_ln` (pre-LayerNorm, tied head) describe.
EXPORTABLE = ("llama", "mistral", "qwen2", "granite", "phi3", "mixtral", "gpt2", "gpt_bigcode")

_L = r"layers\.(?P<layer>\d+)\."
#: Role of each stored tensor below the model prefix: (role, the block norm whose gain its reader absorbs,
#: the gated unit group it belongs to as (group prefix below the layer, its up tensor, its down tensor)).
#: ``gate_up``: Phi-3's fused [gate; up] rows; Mixtral's experts are stored per expert (w1 gate, w3 up, w2 down).
_MLP = ("mlp.", "mlp.up_proj.weight", "mlp.down_proj.weight")
_PHI3 = ("mlp.", "mlp.gate_up_proj.weight", "mlp.down_proj.weight")
_EXPERT = ("block_sparse_moe.experts.{unit}.", "block_sparse_moe.experts.{unit}.w3.weight",
           "block_sparse_moe.experts.{unit}.w2.weight")
LAYER_ROLES: dict[str, tuple[str, str | None, tuple[str, str, str] | None]] = {
    _L + r"(input_layernorm|post_attention_layernorm)\.weight": ("gain", None, None),
    _L + r"self_attn\.(q|k|v|qkv)_proj\.weight": ("reader", "input_layernorm", None),
    _L + r"self_attn\.(q|k|v|qkv)_proj\.bias": ("unchanged", None, None),
    _L + r"self_attn\.o_proj\.weight": ("writer", None, None),
    _L + r"self_attn\.o_proj\.bias": ("writer_bias", None, None),
    _L + r"mlp\.gate_proj\.weight": ("reader", "post_attention_layernorm", None),
    _L + r"mlp\.gate_proj\.bias": ("unchanged", None, None),
    _L + r"mlp\.up_proj\.weight": ("up", "post_attention_layernorm", _MLP),
    _L + r"mlp\.up_proj\.bias": ("up_bias", None, _MLP),
    _L + r"mlp\.gate_up_proj\.weight": ("gate_up", "post_attention_layernorm", _PHI3),
    _L + r"mlp\.down_proj\.weight": ("down", None, _MLP),
    _L + r"mlp\.down_proj\.bias": ("writer_bias", None, None),
    _L + r"block_sparse_moe\.gate\.weight": ("router", "post_attention_layernorm", None),
    _L + r"block_sparse_moe\.experts\.(?P<unit>\d+)\.w1\.weight": ("reader", "post_attention_layernorm", None),
    _L + r"block_sparse_moe\.experts\.(?P<unit>\d+)\.w3\.weight": ("up", "post_attention_layernorm", _EXPERT),
    _L + r"block_sparse_moe\.experts\.(?P<unit>\d+)\.w2\.weight": ("down", None, _EXPERT),
}
_COMPILED = [(re.compile(p + "$"), role) for p, role in LAYER_ROLES.items()]


@dataclass
class WholeModelFix:
    """What ``export --whole-model`` fixed and left, for the export record and its summary."""

    head: str
    rotation: ResidualRotation | None
    transformed: list[str] = field(default_factory=list)
    min_unit_moment: float = 1.0
    #: Mixtral: experts chosen per token (0: a dense MLP).
    top_k: int = 0

    def to_dict(self) -> dict:
        fixed = [{"symmetry": "norm_gains", "rule": "every block norm's gain folded into its readers (gains all ones)"
                  + ("; the final gain folded into the head" if self.head == "untied" else "")},
                 {"symmetry": "mlp_scalings", "rule": "per gated unit ||up row|| = ||down column||, up row's third "
                                                      "moment positive"}]
        unfixed = [{"symmetry": "global_scale", "why": "not exact: the norms' eps breaks it"},
                   {"symmetry": "log_prob_head_shift", "why": "not a symmetry of the logits, which are the outputs"}]
        if self.top_k:
            fixed.append({"symmetry": "router_shift", "rule": "each router column centred over the experts"})
        if self.top_k == 1:
            unfixed.append({"symmetry": "router_unused", "why": "top-1 routing: the router only picks; every small "
                                                               "change of it is null, but the picks are not, so no "
                                                               "representative is chosen"})
        if self.rotation is not None:
            fixed.append({"symmetry": "residual_rotation", "rule": "residual basis = eigenvectors of E^T E, eigenvalues "
                                                                   "descending, third moment of E's columns positive"})
        else:
            unfixed.append({"symmetry": "tie_commutant", "why": "tied head: the final gain is kept and the residual "
                                                                "rotation is blocked, except inside blocks of equal "
                                                                "final-gain values, left as stored"})
        out = {"gauge": {"name": WHOLE_GAUGE_NAME, "version": WHOLE_GAUGE_VERSION}, "head": self.head,
               "fixed": fixed, "unfixed": unfixed, "transformed_tensors": len(self.transformed),
               "min_unit_third_moment": self.min_unit_moment}
        if self.rotation is not None:
            out["rotation_min_eigen_gap"] = self.rotation.min_gap
            out["rotation_min_third_moment"] = self.rotation.min_moment
            out["unique"] = self.rotation.unique and self.min_unit_moment > 1e-10
        else:
            out["unique"] = self.min_unit_moment > 1e-10
        return out


def refusal(model) -> str | None:
    """Why ``export --whole-model`` cannot fix this checkpoint (None: it can)."""
    mt = model.config.model_type
    if mt not in EXPORTABLE:
        return (f"export --whole-model fixes the pre-RMSNorm gated form with separate gate/up/down projections "
                f"and the pre-LayerNorm form ({', '.join(EXPORTABLE)}); model_type {mt!r} is not among them: export "
                "without --whole-model (the attention gauge is still fixed)")
    why = why_not_derived(model, FORM_BY_TYPE[mt])
    if why:
        return f"export --whole-model: {why}; export without it"
    return None


def assign_roles(model, role_of) -> dict:
    """``{stored tensor: role_of(name)}`` over every floating-point parameter tensor of ``model``; a tensor
    whose role is None refuses the export by name (it would be left in the old basis)."""
    roles, unknown = {}, []
    for key in model.reader.keys():
        if not model.reader.dtype(key).is_floating_point or model.adapter.is_buffer(key):
            continue
        role = role_of(key)
        if role is None:
            unknown.append(key)
        else:
            roles[key] = role
    if unknown:
        raise IdinspectError(f"export --whole-model does not know how tensor {unknown[0]} transforms"
                             f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; it would be left "
                             "in the old basis, so it refuses: export without --whole-model")
    return roles


class WholeModelReader(ViewReader):
    """The checkpoint as the whole-model fix transforms it: ``get`` returns the transformed tensor
    (float64) for every tensor with a role, the stored one otherwise; names, shapes and dtypes are the
    stored ones. Per-layer scalings are computed once, on first use."""

    def __init__(self, model):
        why = refusal(model)
        if why:
            raise IdinspectError(why)
        super().__init__(model.reader)
        self._prefix = model.adapter.prefix
        embed, final, head = NAMES[PRE_RMS_GATED]
        self._embed, self._final = stored_key(model, embed), stored_key(model, final)
        self._head = stored_key(model, head)
        self.head = "untied" if self._head is not None else "tied"
        self._roles = assign_roles(model, self._role)
        rotation = residual_rotation(self._reader.get(self._embed)) if self.head == "untied" else None
        self.fix = WholeModelFix(self.head, rotation, sorted(k for k in self._roles if self.transforms(k)),
                                 top_k=int(model.adapter.optional("num_experts_per_tok", 0) or 0)
                                 if model.config.model_type == "mixtral" else 0)
        self._q = rotation.q if rotation is not None else None
        self._scalings: dict[str, torch.Tensor] = {}
        self._rotated: dict[str, torch.Tensor] = {}      # a unit group's rotated up source until its get

    def _role(self, key: str) -> tuple[str, str | None, tuple[str, str, str] | None] | None:
        """(role, the gain tensor it absorbs, its gated unit group: (key, up tensor, down tensor, gain tensor))
        of stored tensor ``key``; None: no role."""
        rel = key.removeprefix(self._prefix)
        if key == self._embed:
            return ("embedding", None, None)
        if key == self._final:
            return ("final_gain", None, None)
        if key == self._head:
            return ("head", self._final, None)
        for pattern, (role, norm, group) in _COMPILED:
            m = pattern.match(rel)
            if m:
                stem = f"{self._prefix}layers.{m.group('layer')}."
                unit = m.groupdict().get("unit")
                if group == _MLP and f"{stem}{_MLP[1]}" not in self._reader:
                    group = _PHI3                                  # down_proj of a fused gate_up
                units = None if group is None else tuple(stem + g.format(unit=unit) for g in group) \
                    + (f"{stem}post_attention_layernorm.weight",)
                return (role, f"{stem}{norm}.weight" if norm else None, units)
        return None

    def transforms(self, name: str) -> bool:
        """Whether ``get(name)`` differs from the stored tensor (by a role other than unchanged)."""
        role = self._roles.get(name)
        return role is not None and role[0] != "unchanged" and not (role[0] == "final_gain" and self.head == "tied")

    def get(self, name: str) -> torch.Tensor:
        role = self._roles.get(name)
        if role is None or not self.transforms(name):
            return self._reader.get(name)
        kind, gain, units = role
        if kind in ("gain", "final_gain"):
            return torch.ones(self._reader.shape(name), dtype=torch.float64)
        if kind == "embedding":
            return self._rotate_in(self._reader.get(name).to(torch.float64))
        if kind in ("reader", "head", "router"):
            w = self._rotate_in(fold_norm_gain(self._reader.get(name), self._reader.get(gain)))
            return centre_columns(w) if kind == "router" else w     # router: W_r + 1 v^T moves every logit alike
        if kind == "writer":
            return self._rotate_out(self._reader.get(name).to(torch.float64))
        if kind == "writer_bias":
            return self._rotate_in(self._reader.get(name).to(torch.float64)[None, :])[0]
        a = self._unit_scalings(units)
        if kind in ("up", "gate_up"):       # the source the scalings were read from, once (Phi-3: [gate; up])
            w = self._rotated.pop(units[0], None)
            w = self._rotated_source(units) if w is None else w
            f = w.shape[0] - a.numel()
            return torch.cat([w[:f], scale_rows(w[f:], a)])
        if kind == "up_bias":
            return scale_rows(self._reader.get(name), a)
        return divide_columns(self._rotate_out(self._reader.get(name).to(torch.float64)), a)    # down

    # the transforms ------------------------------------------------------------------
    def _rotate_in(self, w: torch.Tensor) -> torch.Tensor:
        """A reader (out, d) of the rotated stream: W Q."""
        return w if self._q is None else w @ self._q

    def _rotate_out(self, w: torch.Tensor) -> torch.Tensor:
        """A writer (d, in) into the rotated stream: Q^T W."""
        return w if self._q is None else self._q.T @ w

    def _rotated_source(self, units: tuple[str, str, str, str]) -> torch.Tensor:
        """The unit group's up tensor (f, d) (Phi-3: gate_up (2f, d), whose last f rows are the up rows),
        gain folded and rotated."""
        _, up_name, _, gain = units
        return self._rotate_in(fold_norm_gain(self._reader.get(up_name), self._reader.get(gain)))

    def _unit_scalings(self, units: tuple[str, str, str, str]) -> torch.Tensor:
        """Rule 3's a (f,) of a unit group, computed once. The rotated up source is kept for its own
        ``get`` (read and rotated once); the down columns' norms need no rotation (||Q^T w|| = ||w||)."""
        key = units[0]
        if key not in self._scalings:
            down = self._reader.get(units[2])
            source = self._rotated_source(units)
            a, moment = gated_unit_scalings(source[source.shape[0] - down.shape[1]:], down)
            self._scalings[key] = a
            self._rotated[key] = source
            self.fix.min_unit_moment = min(self.fix.min_unit_moment, moment)
        return self._scalings[key]


__all__ = ["EXPORTABLE", "LAYER_ROLES", "assign_roles", "WholeModelFix", "WholeModelReader", "refusal"]

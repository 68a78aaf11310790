"""``export --whole-model`` for the pre-LayerNorm form (GPT-2, GPTBigCode; tied head): roles as data.

The mathematics is :mod:`idinspect.gauge.whole_model_ln_fix` (``x W`` orientation); here each stored
tensor gets its role by name and orientation (GPT-2's Conv1D is stored (in, out), GPTBigCode's
nn.Linear (out, in)), and :class:`PreLayerNormReader` serves the transformed tensors (float64) in
place of the stored ones, as :class:`~.whole_model.WholeModelReader` does for the RMSNorm form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..gauge.whole_model_fix import WHOLE_GAUGE_NAME, WHOLE_GAUGE_VERSION
from ..gauge.whole_model_ln_fix import (
    centre_columns,
    centre_outputs,
    centre_vector,
    fold_layer_norm,
    relu_unit_scalings,
)
from ..sources.checkpoint import ViewReader
from .whole_model import assign_roles

#: model_type -> whether its projections are stored (in, out) (Conv1D) rather than (out, in).
CONV1D = {"gpt2": True, "gpt_bigcode": False}
#: Role of each stored tensor below the model prefix: (role, the norm its reader reads).
LAYER_ROLES: dict[str, tuple[str, str | None]] = {
    r"h\.(\d+)\.(ln_1|ln_2)\.weight": ("gain", None),
    r"h\.(\d+)\.(ln_1|ln_2)\.bias": ("shift", None),
    r"h\.(\d+)\.attn\.c_attn\.(weight|bias)": ("reader", "ln_1"),
    r"h\.(\d+)\.attn\.c_proj\.(weight|bias)": ("writer", None),
    r"h\.(\d+)\.mlp\.c_fc\.(weight|bias)": ("fc", "ln_2"),
    r"h\.(\d+)\.mlp\.c_proj\.(weight|bias)": ("proj", None),
}
_COMPILED = [(re.compile(p + "$"), role) for p, role in LAYER_ROLES.items()]
MODEL_ROLES = {"wte.weight": "unchanged", "wpe.weight": "positions", "ln_f.weight": "unchanged",
               "ln_f.bias": "unchanged"}


@dataclass
class PreLayerNormFix:
    """What ``export --whole-model`` fixed and left in a pre-LayerNorm checkpoint."""

    relu: bool
    transformed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        fixed = [{"symmetry": "norm_gains", "rule": "every block LayerNorm's gain folded into its readers (gains 1)"},
                 {"symmetry": "norm_bias_shifts", "rule": "every block LayerNorm's bias folded into its readers' "
                                                          "biases (biases 0)"},
                 {"symmetry": "mean_directions", "rule": "readers' weights centred over their inputs, writers' "
                                                         "weights and biases centred over the stream"},
                 {"symmetry": "position_tables", "rule": "each position row centred"}]
        if self.relu:
            fixed.append({"symmetry": "mlp_scalings", "rule": "per ReLU unit ||(fc column, bias)|| = ||proj row||"})
        unfixed = [{"symmetry": "global_scale", "why": "not exact: the norms' eps breaks it"},
                   {"symmetry": "log_prob_head_shift", "why": "not a symmetry of the logits, which are the outputs"},
                   {"symmetry": "tie_commutant", "why": "tied head: the final norm is kept, and the rotations fixing 1 "
                                                       "inside blocks of equal final-gain values are left as stored"}]
        return {"gauge": {"name": WHOLE_GAUGE_NAME, "version": WHOLE_GAUGE_VERSION}, "head": "tied", "fixed": fixed,
                "unfixed": unfixed, "transformed_tensors": len(self.transformed), "unique": True}


class PreLayerNormReader(ViewReader):
    """The pre-LayerNorm checkpoint as the whole-model fix transforms it (see the module docstring)."""

    def __init__(self, model):
        super().__init__(model.reader)
        self._prefix = model.adapter.prefix
        self._conv1d = CONV1D[model.config.model_type]
        relu = str(model.adapter.optional("activation_function", "")) == "relu"
        self._roles = assign_roles(model, self._role)
        self.head = "tied"
        self.relu = relu
        self.fix = PreLayerNormFix(relu, sorted(k for k in self._roles if self.transforms(k)))
        self._scalings: dict[str, torch.Tensor] = {}
        self._pairs: dict[str, list] = {}          # module -> [(weight, bias) transformed, parts not yet served]

    def _role(self, key: str) -> tuple[str, str | None, str, str] | None:
        """(role, the norm it reads, its layer's name stem, weight or bias) of stored tensor ``key``; None: none."""
        rel = key.removeprefix(self._prefix)
        if rel in MODEL_ROLES:
            return (MODEL_ROLES[rel], None, "", "weight")
        for pattern, (role, norm) in _COMPILED:
            m = pattern.match(rel)
            if m:
                stem = f"{self._prefix}h.{m.group(1)}."
                return (role, f"{stem}{norm}." if norm else None, stem, rel.rsplit(".", 1)[1])
        return None

    def transforms(self, name: str) -> bool:
        role = self._roles.get(name)
        return role is not None and role[0] != "unchanged"

    def get(self, name: str) -> torch.Tensor:
        if not self.transforms(name):
            return self._reader.get(name)
        kind, norm, stem, part = self._roles[name]
        if kind == "gain":
            return torch.ones(self._reader.shape(name), dtype=torch.float64)
        if kind == "shift":
            return torch.zeros(self._reader.shape(name), dtype=torch.float64)
        if kind == "positions":
            return centre_outputs(self._reader.get(name).to(torch.float64))
        module = name.rsplit(".", 1)[0]
        if kind in ("reader", "fc"):
            w, c = self._served(module, part, lambda: self._folded_reader(module, norm))
            if kind == "fc" and self.relu:
                a = self._unit_scalings(stem)
                w, c = w * a, c * a
            return self._stored_orientation(w) if part == "weight" else c
        w, b = self._served(module, part, lambda: self._writer(module))
        if kind == "proj" and self.relu:
            w = w / self._unit_scalings(stem)[:, None]
        return self._stored_orientation(w) if part == "weight" else b

    def _served(self, module: str, part: str, compute):
        """``compute()`` (a module's transformed weight and bias, which come from one computation) once per
        module: kept until both of its stored parts have been served, so each is read and folded once."""
        if module not in self._pairs:
            self._pairs[module] = [compute(), {p for p in ("weight", "bias") if f"{module}.{p}" in self._reader}]
        value, waiting = self._pairs[module]
        waiting.discard(part)
        if not waiting:
            del self._pairs[module]
        return value

    # the transforms ------------------------------------------------------------------
    def _xw(self, module: str) -> torch.Tensor:
        """The module's weight in the x W orientation (in, out), float64."""
        w = self._reader.get(f"{module}.weight").to(torch.float64)
        return w if self._conv1d else w.T

    def _stored_orientation(self, w: torch.Tensor) -> torch.Tensor:
        return w if self._conv1d else w.T

    def _bias(self, module: str) -> torch.Tensor | None:
        key = f"{module}.bias"
        return self._reader.get(key).to(torch.float64) if key in self._reader else None

    def _folded_reader(self, module: str, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Rules 1 and 2: (centred diag(g) W, c + beta W) of a reader."""
        w, c = fold_layer_norm(self._xw(module), self._bias(module), self._reader.get(f"{norm}weight"),
                               self._reader.get(f"{norm}bias"))
        return centre_columns(w), c

    def _writer(self, module: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rule 3: (W - (W 1) 1^T / d, b - mean(b) 1) of a writer."""
        b = self._bias(module)
        return centre_outputs(self._xw(module)), None if b is None else centre_vector(b)

    def _unit_scalings(self, stem: str) -> torch.Tensor:
        if stem not in self._scalings:
            fc_module, proj_module = f"{stem}mlp.c_fc", f"{stem}mlp.c_proj"
            fc, fc_bias = self._served(fc_module, "", lambda: self._folded_reader(fc_module, f"{stem}ln_2."))
            proj, _ = self._served(proj_module, "", lambda: self._writer(proj_module))
            self._scalings[stem] = relu_unit_scalings(fc, fc_bias, proj)
        return self._scalings[stem]


__all__ = ["CONV1D", "LAYER_ROLES", "PreLayerNormFix", "PreLayerNormReader"]

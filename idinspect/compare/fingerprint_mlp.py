"""The fingerprint's optional ``mlp`` section (``fingerprint --whole-model``): MLP unit invariants.

    "mlp": {"dtypes": ["bfloat16", ...],                       the MLP tensors' and gains' stored dtypes
            "layers": [{"index", "units": f, "gate", "scale", "cosine",           sorted, [f] each
                        "radius_gate", "radius_scale", "radius_cosine"}]}         [f] each

Arrays as the attention's: base64 float32 little-endian; radii rounded up. What a reader checks
(besides the schema and the integrity digest, which cover this section like any other key):
declared sizes before decoding, every value finite and >= 0, cosines <= 1, and every radius within
the range the declared dtypes allow (:func:`radius_bounds`, from :mod:`.mlp_invariants`' formulas with
the smallest and the largest unit roundoff of ``dtypes``): a wider radius would accept values the
dtypes cannot explain, a narrower one claims more precision than they hold.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import IdinspectError
from .fingerprint_check import FIX, STORED_SLACK, decode, unit_roundoff_of
from .mlp_invariants import COMPUTE_RTOL, QUANTITIES, LayerMLPInvariants

#: Most MLP units in one layer a fingerprint may declare.
MAX_UNITS = 1 << 20


def radius_bounds(quantity: str, values: torch.Tensor, u_min: float, u_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(lower, upper) radius of ``values`` of one quantity for unit roundoffs between u_min and u_max."""
    if quantity == "cosine":
        low, high = 2.5 * 2 * u_min, 2.5 * 2 * (2 * u_max + u_max * u_max)
        return torch.full_like(values, low + COMPUTE_RTOL), torch.full_like(values, high + COMPUTE_RTOL)
    e = 2 * u_max + u_max * u_max
    high = e if quantity == "gate" else (1 + e) * (1 + u_max) - 1
    return (u_min + COMPUTE_RTOL) * values.abs(), (high + COMPUTE_RTOL) * values.abs()


def mlp_section(layers: list[LayerMLPInvariants], dtypes: list[str], encode) -> dict:
    """The ``mlp`` section of a fingerprint (``encode(tensor, up=...)``: the fingerprint's array encoding)."""
    out = []
    for L in layers:
        entry = {"index": L.index, "units": int(L.values["gate"].numel())}
        for q in QUANTITIES:
            entry[q] = encode(L.values[q])
            entry[f"radius_{q}"] = encode(L.radii[q], up=True)
        out.append(entry)
    return {"dtypes": sorted(set(dtypes)), "layers": out}


def read_mlp_section(path: Path, section: dict) -> list[LayerMLPInvariants]:
    """The checked unit invariants of a fingerprint's ``mlp`` section (IdinspectError naming the file)."""
    us = [unit_roundoff_of(name) for name in section["dtypes"]]
    if not us:
        raise IdinspectError(f"{path}: mlp.dtypes is empty; {FIX}")
    u_min, u_max = min(us), max(us)
    layers = []
    for entry in section["layers"]:
        index, units = int(entry["index"]), int(entry["units"])
        if not 1 <= units <= MAX_UNITS:
            raise IdinspectError(f"{path}: mlp layer {index} declares {units} units (1 to {MAX_UNITS}); {FIX}")
        values, radii = {}, {}
        for q in QUANTITIES:
            v = decode(path, f"mlp layer {index} {q}", entry[q], (units,))
            r = decode(path, f"mlp layer {index} radius_{q}", entry[f"radius_{q}"], (units,))
            for what, t in ((q, v), (f"radius_{q}", r)):
                bad = ~torch.isfinite(t) | (t < 0)
                if bool(bad.any()):
                    raise IdinspectError(f"{path}: mlp layer {index} {what} holds {float(t[bad][0])!r}, not a finite "
                                         f"number >= 0; {FIX}")
            if q == "cosine" and bool((v > 1 + STORED_SLACK).any()):
                raise IdinspectError(f"{path}: mlp layer {index} cosine holds {float(v.max())!r} > 1; {FIX}")
            low, high = radius_bounds(q, v, u_min, u_max)
            for mask, what in ((r > high * (1 + STORED_SLACK), "above the largest"),
                               (r < low * (1 - STORED_SLACK), "below the smallest")):
                if bool(mask.any()):
                    k = int(mask.nonzero()[0, 0])
                    raise IdinspectError(f"{path}: mlp layer {index} unit {k}: radius_{q} {float(r[k]):.3g} is {what} "
                                         f"rounding radius {', '.join(section['dtypes'])} allow; {FIX}")
            values[q], radii[q] = v, r
        layers.append(LayerMLPInvariants(index, values, radii))
    return layers


__all__ = ["MAX_UNITS", "mlp_section", "radius_bounds", "read_mlp_section"]

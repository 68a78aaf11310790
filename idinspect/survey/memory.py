"""How much memory one model's inspection holds, from its safetensors headers, and the admission rule
that keeps the models in flight within a budget.

Inspection streams layers: a model in flight holds the layers analysed at once (the analyzer's own
bound: each layer's attention tensors in the stored dtype plus a float64 copy of the largest, times
the layers in flight) and its result (the singular values of every head, as Python floats). A
worker process holds, besides, Python with torch and idinspect imported: :data:`WORKER_BASE_BYTES`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Resident memory of a worker process with torch and idinspect imported, before any model
#: (measured: ~0.33 GB after inspecting a tiny model on CPython 3.11, torch 2.13 CPU; rounded up).
WORKER_BASE_BYTES = 512 * 2**20
#: Bytes per singular value kept in a result (a float in a list, then in the JSON-contract dict).
_BYTES_PER_VALUE = 32


@dataclass(frozen=True)
class Estimate:
    """``bytes``: memory the model's inspection holds beyond the worker's base; ``known``: False when
    the headers could not be read here (a hub model not in the cache: then the fair share is assumed)."""

    bytes: int
    known: bool


def estimate_model_bytes(source: str, *, token: str | None = None, cache_dir: str | None = None,
                         threads: int | None = None) -> Estimate:
    """Estimate from headers only (nothing is downloaded: a hub model is looked up in the cache).

    ``threads``: CPUs the inspecting process may use (the analyzer runs up to one layer per CPU).
    """
    from ..analysis.analyzer import layer_bytes_in_flight
    from ..model import load
    from ..numerics.parallel import IN_FLIGHT_BYTES

    try:
        model = load(source, token=token, cache_dir=cache_dir, local_files_only=True)
    except Exception:  # noqa: BLE001 - unreadable here: the worker will say why
        return Estimate(0, False)
    with model:
        try:
            per_layer = layer_bytes_in_flight(model)
            a = model.adapter
            values = a.num_layers * a.n_heads * 2 * a.head_dim
        except Exception:  # noqa: BLE001 - the worker will say why
            return Estimate(0, False)
        cpus = max(1, threads or os.cpu_count() or 1)
        in_flight = max(1, min(cpus, model.num_layers, IN_FLIGHT_BYTES // max(1, per_layer)))
    return Estimate(in_flight * per_layer + values * _BYTES_PER_VALUE, True)


def available_memory() -> int:
    """Memory available to new processes now (Linux MemAvailable; else total physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def default_budget() -> int:
    """Half the memory available now."""
    return available_memory() // 2


class Admission:
    """Admit models while the estimates of those in flight fit ``budget`` bytes (workers' base memory
    already taken off) and fewer than ``slots`` run; a model is always admitted when none is in
    flight, so one larger than the budget still runs, alone. Unknown estimates count as the fair
    share ``budget / slots``."""

    def __init__(self, budget: int, slots: int):
        self.budget = max(0, int(budget))
        self.slots = max(1, int(slots))
        self.in_flight: dict[object, int] = {}
        self.peak_models = 0
        self.peak_bytes = 0

    def cost(self, estimate: Estimate) -> int:
        return estimate.bytes if estimate.known else self.budget // self.slots

    def fits(self, estimate: Estimate) -> bool:
        if not self.in_flight:
            return True
        return len(self.in_flight) < self.slots and sum(self.in_flight.values()) + self.cost(estimate) <= self.budget

    def enter(self, key: object, estimate: Estimate) -> None:
        self.in_flight[key] = self.cost(estimate)
        self.peak_models = max(self.peak_models, len(self.in_flight))
        self.peak_bytes = max(self.peak_bytes, sum(self.in_flight.values()))

    def leave(self, key: object) -> None:
        self.in_flight.pop(key, None)


def worker_count(requested: int, budget: int) -> int:
    """Workers the budget allows, each taking :data:`WORKER_BASE_BYTES` of it; at least 1."""
    return max(1, min(int(requested), int(budget) // WORKER_BASE_BYTES))

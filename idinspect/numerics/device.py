"""Where the analyzer's linear algebra runs: ``"cpu"`` (default) or ``"cuda"`` (falls back with a warning)."""

from __future__ import annotations

import logging

import torch

from ..errors import IdinspectError

log = logging.getLogger("idinspect")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/``"cpu"`` -> cpu; ``"cuda"``/``"cuda:N"`` -> that GPU when torch sees one.

    Asking for CUDA on a machine without it logs one warning line (stderr) and returns cpu.
    """
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise IdinspectError(f"unknown device {device!r}; use 'cpu' or 'cuda' (optionally 'cuda:N')") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise IdinspectError(f"device {device!r} is not supported; use 'cpu' or 'cuda'")
    if not torch.cuda.is_available():
        log.warning("idinspect: device %r requested but torch.cuda.is_available() is False; using cpu", str(device))
        return torch.device("cpu")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise IdinspectError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device{'s' * (torch.cuda.device_count() != 1)} visible")
    return dev

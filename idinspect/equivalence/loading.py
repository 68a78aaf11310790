"""Loading a checkpoint with stock transformers for verify's functional check, in the foreground or on a
background thread while the invariant check computes.

Loading is mostly the import of transformers and the model's modelling module (Python, holding the GIL)
and the copy of the weights into the compute dtype (memory traffic); the invariant check is torch
kernels that release the GIL. Started together (:class:`BackgroundLoad`), the load of A is hidden behind
the invariant check instead of following it: on the Llama-3.2-1B shape, about 4 s of a 16 s verify
(imports 2-3 s, A's float32 copy about 1.8 s on an idle 2-core machine).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..errors import IdinspectError
from ..sources.hf_logging import quiet_transformers


def model_class(config):
    """The transformers class named by ``config.architectures[0]``, else AutoModel."""
    import transformers

    archs = getattr(config, "architectures", None) or []
    cls = getattr(transformers, archs[0], None) if archs else None
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        return cls
    return transformers.AutoModel


def load_for_probe(path: Path, plan, offload_folder: str | None = None):
    """``(config, model)``: ``path`` loaded by its transformers class in the plan's dtype (stored dtype when
    streamed), sdpa where the class has it, eager MoE experts, in eval mode; offloaded to
    ``offload_folder`` when the plan says so. Raises :class:`IdinspectError` when transformers cannot load it."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path))
    cls = model_class(config)
    kwargs: dict = {"dtype": "auto" if plan.streamed else plan.compute_dtype,
                    "attn_implementation": "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager",
                    "experts_implementation": "eager"}   # MoE grouped_mm kernels take no float64
    if plan.offload:
        kwargs.update(device_map="auto", max_memory={"cpu": plan.max_memory}, offload_folder=offload_folder)
    try:
        with quiet_transformers():   # no loading bars or config chatter from a library call either
            model = cls.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise IdinspectError(f"{path}: transformers cannot load it ({first})") from None
    model.eval()
    return config, model


class BackgroundLoad:
    """:func:`load_for_probe` of an in-memory or streamed plan, started on a thread of its own now and
    collected by :meth:`take` (which re-raises what the load raised). :meth:`drop` waits for it and
    lets the model go (a verify that stops before its functional check).

    The thread imports transformers first; until it has, no other thread may import it
    (:meth:`wait_imported`): transformers' top-level module is built lazily, and a second thread that
    imports it meanwhile finds it half built ("cannot import name 'AutoConfig' from 'transformers'")."""

    def __init__(self, path: Path, plan):
        if plan.offload:
            raise ValueError("an offloaded load owns a temporary folder: load it in the foreground")
        self.path, self.plan = Path(path), plan
        self._imported = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idinspect-load")
        self._future: Future | None = self._pool.submit(self._run)
        self._pool.shutdown(wait=False)

    def _run(self):
        try:
            from transformers import AutoConfig, AutoModel  # noqa: F401 - the lazy module built here, once
        finally:
            self._imported.set()
        return load_for_probe(self.path, self.plan)

    def wait_imported(self) -> None:
        """Return once the thread has imported transformers (or failed to): from then on any thread may."""
        self._imported.wait()

    def take(self):
        """``(config, model)``, waiting for the load to finish."""
        if self._future is None:
            raise RuntimeError("the background load was already taken or dropped")
        future, self._future = self._future, None
        return future.result()

    def drop(self) -> None:
        if self._future is not None:
            future, self._future = self._future, None
            try:
                future.result()
            except Exception:   # noqa: BLE001 - nobody asked for this model; its error is no one's answer
                pass


__all__ = ["BackgroundLoad", "load_for_probe", "model_class"]

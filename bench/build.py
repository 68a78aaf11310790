"""Build (and cache) a synthetic checkpoint without ever holding the whole model in memory.

The model is constructed on the meta device (no storage) only to learn its parameter names,
shapes and tying; tensors are then filled with ``normal(0, 0.02)`` in the storage dtype and written
shard by shard with ``safetensors.torch.save_file``, with the same file names, index
(``metadata.total_size``/``total_parameters``, ``weight_map``) and ``format: pt`` header metadata
that ``save_pretrained`` writes. Peak memory is about one shard (about 1 GB), not two models.

Each finished checkpoint is loaded once with ``transformers`` in a child process (no missing,
unexpected or mismatched keys) before it is marked complete. ``python -m bench.build NAME`` builds
one by name.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import zlib
from pathlib import Path

from .specs import FULL, QUICK, SCALE, ModelSpec

CACHE = Path(__file__).resolve().parent / "cache"
MODELS = CACHE / "models"


def checkpoint_dir(spec: ModelSpec) -> Path:
    """Where ``spec`` is cached."""
    return MODELS / f"{spec.name}-{spec.digest()}"


def marker_path(spec: ModelSpec) -> Path:
    """The JSON file written beside the checkpoint once it is complete and verified."""
    return MODELS / f"{spec.name}-{spec.digest()}.done.json"


def parameter_plan(spec: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every stored tensor, in module order, tied parameters stored once."""
    import torch
    import transformers as tf

    config = spec.make_config()
    cls = getattr(tf, spec.model_class)
    with torch.device("meta"):
        model = cls(config)
    # named_parameters() drops duplicates (tied lm_head / decoder), exactly what is saved.
    plan = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
    persistent = set(model.state_dict()) - {n for n, _ in model.named_parameters(remove_duplicate=False)}
    if persistent:
        raise RuntimeError(f"{spec.model_class} has persistent buffers {sorted(persistent)}; the builder only fills parameters")
    return plan


def shard_plan(plan: list[tuple[str, tuple[int, ...]]], itemsize: int, max_bytes: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Greedy split in order: a new shard starts when the next tensor would exceed ``max_bytes``."""
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in plan:
        nbytes = itemsize * _numel(shape)
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    return shards


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _random_tensor(name: str, shape: tuple[int, ...], dtype, seed: int):
    """``normal(0, 0.02)`` in ``dtype``, deterministic per tensor name."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    return torch.empty(shape, dtype=dtype).normal_(0.0, 0.02, generator=gen)


def write_checkpoint(spec: ModelSpec, out: Path, seed: int = 0) -> dict:
    """Write config, generation config and weights of ``spec`` into ``out``; returns sizes."""
    import torch
    from safetensors.torch import save_file

    dtype = getattr(torch, spec.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    plan = parameter_plan(spec)
    shards = shard_plan(plan, itemsize, spec.max_shard_size)
    out.mkdir(parents=True)
    config = spec.make_config()
    config.save_pretrained(out)
    if spec.causal_lm:
        from transformers import GenerationConfig

        GenerationConfig.from_model_config(config).save_pretrained(out)
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    weight_map: dict[str, str] = {}
    total_bytes = total_params = 0
    for fname, shard in zip(names, shards):
        tensors = {name: _random_tensor(name, shape, dtype, seed) for name, shape in shard}
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        for name, t in tensors.items():
            weight_map[name] = fname
            total_bytes += t.numel() * itemsize
            total_params += t.numel()
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_parameters": total_params, "total_size": total_bytes},
                 "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return {"bytes": total_bytes, "parameters": total_params, "shards": len(shards), "tensors": len(plan)}


def ensure_checkpoint(spec: ModelSpec, log=print) -> Path:
    """The cached checkpoint of ``spec``, building and verifying it first if needed."""
    from .measure import run_task_checked

    final = checkpoint_dir(spec)
    marker = marker_path(spec)
    if final.is_dir() and marker.is_file():
        return final
    MODELS.mkdir(parents=True, exist_ok=True)
    _check_disk(spec)
    partial = final.with_name(final.name + ".partial")
    for stale in (partial, final):
        if stale.exists():
            shutil.rmtree(stale)
    log(f"building {spec.name} ({spec.layers} layers, {spec.dtype}) in {final} ...")
    t0 = time.perf_counter()
    info = write_checkpoint(spec, partial, seed=spec.seed)
    build_s = time.perf_counter() - t0
    verify = run_task_checked(["verify", str(partial), spec.model_class])
    partial.rename(final)
    marker.write_text(json.dumps({"spec": spec.name, "digest": spec.digest(), **info,
                                  "build_s": round(build_s, 2), "verify": verify}, indent=2) + "\n")
    log(f"  {info['parameters'] / 1e9:.3f} B parameters, {info['bytes'] / 1e9:.2f} GB in {info['shards']} "
        f"shard(s), built in {build_s:.1f} s; loads in transformers ({verify['load_s']:.1f} s)")
    return final


def ensure_checkpoint_in_child(spec: ModelSpec, log=print) -> Path:
    """:func:`ensure_checkpoint` in a child process when a build is needed: a build holds about one
    shard (~1 GB), which would raise the harness's own peak RSS and with it every later child's
    measured peak (see :mod:`bench.measure`)."""
    from .measure import run_child

    final = checkpoint_dir(spec)
    if final.is_dir() and marker_path(spec).is_file():
        return final
    log(f"building {spec.name} ({spec.layers} layers, {spec.dtype}) in a child process ...")
    res = run_child([sys.executable, "-m", "bench.build", spec.name])
    if not res.ok or not marker_path(spec).is_file():
        raise RuntimeError(f"building {spec.name} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    log(res.stdout.strip())
    return final


def _check_disk(spec: ModelSpec) -> None:
    """Refuse to start a build that would leave less than 5 GB free."""
    import torch

    itemsize = torch.empty((), dtype=getattr(torch, spec.dtype)).element_size()
    need = itemsize * sum(_numel(s) for _, s in parameter_plan(spec))
    free = shutil.disk_usage(MODELS).free
    if free - need < 5e9:
        raise RuntimeError(f"building {spec.name} needs {need / 1e9:.1f} GB but only {free / 1e9:.1f} GB is free on "
                           f"{MODELS}; free space or remove bench/cache/")


def main(argv: list[str]) -> int:
    """``python -m bench.build NAME...``: build the named specs (``all`` for every one)."""
    from .specs import compare_pair

    specs = {s.name: s for s in (*FULL, *QUICK, *SCALE, *(x for n in (2, 4, 16) for x in compare_pair(n)), *compare_pair(2, "8b"))}
    wanted = list(specs) if argv == ["all"] else argv
    unknown = [n for n in wanted if n not in specs]
    if not wanted or unknown:
        print(f"usage: python -m bench.build NAME... | all   (names: {', '.join(specs)})", file=sys.stderr)
        return 2
    for name in wanted:
        print(ensure_checkpoint(specs[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Workloads the benchmark runs in child processes: ``python -m bench.tasks TASK ARGS...``.

- ``floor DIR NAMES.json [DIR2 NAMES2.json ...]``: read exactly the named tensors with safetensors,
  cast to float32 (several checkpoints in one process: the floor of ``compare``).
- ``copy DIR OUT``: plain copy of the whole checkpoint through safetensors (read every tensor,
  write it, shard by shard; other files copied as bytes).
- ``baseline DIR CLASS DEVICE``: what a user would otherwise write: ``from_pretrained`` plus a full
  SVD (``torch.linalg.svd``: U, S, V^T) of every head's d x d ``W_Q^h W_K^g(h)T`` in float64, the
  precision of idinspect's spectra; timed on layer 0. Beside it, on the same layer, the cheaper
  float32 ``svdvals`` (values only, ~1e-7 relative accuracy) that earlier runs used as the baseline.
- ``verify DIR CLASS``: the checkpoint loads in transformers with no missing/unexpected keys.
- ``names DIR``: the attention tensors idinspect reads (from its own adapter), for the floor.
- ``facts``: library versions, torch's thread count and GPU, for the result file.

Each prints one line ``BENCH_RESULT {json}`` last. Only what a task needs is imported, so the
floor pays for ``torch`` and ``safetensors`` and nothing else. The baseline is only run on
checkpoints built by :mod:`bench.build`; do not point it at untrusted code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()
PREFIX = "BENCH_RESULT "


def emit(result: dict) -> None:
    """Print the task's result line (the harness parses the last such line)."""
    sys.stdout.write(PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def weight_map(directory: Path) -> dict[str, str]:
    """Tensor name -> shard file, from the index or the single ``model.safetensors``."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        return {k: "model.safetensors" for k in f.keys()}  # noqa: SIM118 (a safe_open handle, not a dict)


def floor(directory: Path, names_file: Path) -> dict:
    """Read exactly the attention tensors and cast them to float32, shard by shard."""
    import torch
    from safetensors import safe_open

    t_import = time.perf_counter() - _T0
    names = json.loads(names_file.read_text())
    where = weight_map(directory)
    by_file: dict[str, list[str]] = {}
    for name in names:
        by_file.setdefault(where[name], []).append(name)
    t1 = time.perf_counter()
    elements = 0
    for fname, in_file in by_file.items():
        with safe_open(str(directory / fname), framework="pt") as f:
            for name in in_file:
                elements += f.get_tensor(name).to(torch.float32, copy=True).numel()   # copy: really read the bytes
    return {"import_s": t_import, "read_s": time.perf_counter() - t1, "tensors": len(names), "elements": elements}


def copy(directory: Path, out: Path) -> dict:
    """Read every tensor and write it again (same shards, same header metadata)."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    t1 = time.perf_counter()
    nbytes = 0
    for path in sorted(directory.iterdir()):
        if path.suffix != ".safetensors":
            shutil.copyfile(path, out / path.name)
            continue
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
            metadata = f.metadata()
        save_file(tensors, str(out / path.name), metadata=metadata)
        nbytes += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    return {"copy_s": time.perf_counter() - t1, "bytes": nbytes}


def _qk_factors(model, layer: int):
    """(W_Q [H, d, hd], W_K [G, d, hd]) of ``layer`` in float32 (exact for bf16/fp32 weights), read off the HF modules."""
    cfg = model.config
    mt = cfg.model_type
    if mt == "llama":
        attn = model.model.layers[layer].self_attn
        H, G = cfg.num_attention_heads, cfg.num_key_value_heads
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
        q, k = attn.q_proj.weight.float(), attn.k_proj.weight.float()       # [H*hd, d], [G*hd, d]
        return q.reshape(H, hd, -1).transpose(1, 2), k.reshape(G, hd, -1).transpose(1, 2)
    if mt == "gpt2":
        w = model.transformer.h[layer].attn.c_attn.weight.float()          # Conv1D [d, 3d]
        d, H = cfg.n_embd, cfg.n_head
        W = w.reshape(d, 3, H, d // H).permute(1, 2, 0, 3)
        return W[0], W[1]
    if mt == "bert":
        sa = model.encoder.layer[layer].attention.self
        H = cfg.num_attention_heads
        hd = cfg.hidden_size // H
        q, k = sa.query.weight.float(), sa.key.weight.float()
        return q.reshape(H, hd, -1).transpose(1, 2), k.reshape(H, hd, -1).transpose(1, 2)
    raise ValueError(f"baseline: model_type {mt} not handled")


def baseline(directory: Path, model_class: str, device: str) -> dict:
    """``from_pretrained`` + full float64 SVD of each head's d x d W_QK (and float32 svdvals), layer 0 only."""
    import torch
    import transformers as tf

    auto = tf.AutoModelForCausalLM if model_class != "BertForMaskedLM" else tf.AutoModel
    model = auto.from_pretrained(str(directory), dtype="auto")
    t_loaded = time.perf_counter() - _T0
    if device != "cpu" and not torch.cuda.is_available():
        device = "cpu"
    with torch.no_grad():
        W_Q, W_K = (t.to(device) for t in _qk_factors(model, 0))
        r = W_Q.shape[0] // W_K.shape[0]

        def timed(fn) -> tuple[float, list]:
            t1 = time.perf_counter()
            out = [fn(W_Q[h] @ W_K[h // r].T) for h in range(W_Q.shape[0])]
            if device != "cpu":
                torch.cuda.synchronize()
            return time.perf_counter() - t1, out

        layer_s, full = timed(lambda W: torch.linalg.svd(W.double()))
        layer_f32_s, values = timed(torch.linalg.svdvals)
    return {"load_s": t_loaded, "layer_s": layer_s, "layer_f32_svdvals_s": layer_f32_s, "heads": len(full),
            "d": int(W_Q.shape[1]), "layers": int(model.config.num_hidden_layers), "device": device,
            "top_sv": float(full[0].S[0]), "top_sv_f32": float(values[0][0])}


def verify(directory: Path, model_class: str) -> dict:
    """Load with transformers; no missing/unexpected/mismatched keys; one tensor bit-equal to the file."""
    import torch
    import transformers as tf
    from safetensors import safe_open

    cls = getattr(tf, model_class)
    t1 = time.perf_counter()
    model, info = cls.from_pretrained(str(directory), dtype="auto", output_loading_info=True)
    load_s = time.perf_counter() - t1
    problems = {k: [str(x) for x in v] for k, v in info.items() if v}
    where = weight_map(directory)
    name = sorted(where)[len(where) // 2]
    with safe_open(str(directory / where[name]), framework="pt") as f:
        on_disk = f.get_tensor(name)
    in_model = model.state_dict()[name]
    same = bool(on_disk.dtype == in_model.dtype and torch.equal(on_disk, in_model))
    if problems or not same:
        raise SystemExit(f"verify {directory}: loading problems {problems}; {name} equal: {same}")
    return {"load_s": load_s, "checked_tensor": name, "dtype": str(in_model.dtype)}


def names(directory: Path) -> dict:
    """Every tensor idinspect reads for attention, in layer order."""
    import idinspect

    with idinspect.load(directory) as model:
        return {"names": [k for i in range(model.num_layers) for k in model.adapter.attention_keys(i)]}


def facts() -> dict:
    """Versions of torch, transformers and safetensors; torch's intra-op threads; the GPU torch sees."""
    import safetensors
    import torch
    import transformers

    gpu: dict = {"available": torch.cuda.is_available()}
    if gpu["available"]:
        gpu.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(), cuda=torch.version.cuda)
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "safetensors": safetensors.__version__, "torch_threads": torch.get_num_threads(), "gpu": gpu}


def main(argv: list[str]) -> int:
    """Dispatch ``TASK ARGS...`` and print the result line."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    task, args = argv[0], argv[1:]
    if task == "floor":
        parts = [floor(Path(d), Path(n)) for d, n in zip(args[0::2], args[1::2])]
        result = {**parts[0], "read_s": sum(r["read_s"] for r in parts), "tensors": sum(r["tensors"] for r in parts),
                  "elements": sum(r["elements"] for r in parts), "checkpoints": len(parts)}
    elif task == "copy":
        result = copy(Path(args[0]), Path(args[1]))
    elif task == "baseline":
        result = baseline(Path(args[0]), args[1], args[2] if len(args) > 2 else "cpu")
    elif task == "verify":
        result = verify(Path(args[0]), args[1])
    elif task == "names":
        result = names(Path(args[0]))
    elif task == "facts":
        result = facts()
    else:
        print(f"unknown task {task!r}\n{__doc__}", file=sys.stderr)
        return 2
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

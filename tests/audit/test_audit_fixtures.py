"""Shared fixtures and helpers of the ``idinspect audit`` tests (no tests of its own).

``zoo`` builds, once per session, the tiny checkpoints the audit tests need: a GPT-2 (no-op key
bias and absorbable value bias), a bias-free Llama, the same Llama with a NaN in one key weight, with two rank-deficient
heads, and gauge-fixed by ``idinspect.export``,
a second GPT-2-style model, an empty directory and a readable config of an unsupported type.
Every CLI test runs in a fresh empty working directory so no pyproject.toml policy leaks in.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import CliResult, run_cli

NAN_TENSOR = "model.layers.1.self_attn.k_proj.weight"
RANK_TENSOR = "model.layers.0.self_attn.q_proj.weight"


def audit(*args) -> CliResult:
    """``idinspect audit ARGS...`` in-process."""
    return run_cli("audit", *[str(a) for a in args])


def edit_tensor(directory: Path, tensor: str, edit) -> None:
    """Rewrite the checkpoint's model.safetensors with ``edit(t)`` applied in place to ``tensor``."""
    from safetensors.torch import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    t = tensors[tensor].clone()
    edit(t)
    tensors[tensor] = t
    save_file(tensors, str(path), metadata={"format": "pt"})


def poison(directory: Path, tensor: str, value: float = float("nan")) -> None:
    """Write ``value`` into one entry of ``tensor``."""
    edit_tensor(directory, tensor, lambda t: t.view(-1).__setitem__(3, value))


def zero_rows(t, rows) -> None:
    for r in rows:
        t[r].zero_()


@pytest.fixture(scope="session")
def zoo(tiny_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zoo")
    models = {}
    for name, variant in (("gpt2", "gpt2"), ("llama", "llama-mha"), ("gpt2-other", "gpt2-base-model")):
        models[name] = root / name
        shutil.copytree(tiny_dir(variant), models[name])
    models["llama-nan"] = root / "llama-nan"
    shutil.copytree(models["llama"], models["llama-nan"])
    poison(models["llama-nan"], NAN_TENSOR)
    models["llama-rank"] = root / "llama-rank"  # heads 0 and 2 of layer 0: one query column zeroed
    shutil.copytree(models["llama"], models["llama-rank"])
    edit_tensor(models["llama-rank"], RANK_TENSOR, lambda t: zero_rows(t, (0, 8)))
    from idinspect.exporting.pipeline import export

    models["llama-fixed"] = root / "llama-fixed"
    export(models["llama"], models["llama-fixed"])
    models["empty"] = root / "empty"
    models["empty"].mkdir()
    models["unsupported"] = root / "mamba"          # no attention at all: an unsupported model type
    models["unsupported"].mkdir()
    (models["unsupported"] / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 16}))
    return models


@pytest.fixture(autouse=True)
def isolated_cwd(tmp_path, monkeypatch) -> Path:
    """Each test in a new empty directory, with no GitHub Actions variables."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return work


def audit_json(*args) -> tuple[int, dict]:
    """Run the audit with ``--format json``; (exit code, parsed stdout)."""
    res = audit(*args, "--format", "json")
    return res.code, json.loads(res.stdout)


def findings_of(doc: dict, model: int = 0) -> list[dict]:
    return doc["models"][model]["audit"]["findings"]

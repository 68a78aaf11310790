"""Adapters from other packages (entry-point group ``idinspect.adapters``): the example plugin in
examples/idinspect-plugin-helium is installed into a temporary folder by pip and found by idinspect
through that folder alone; a plugin that claims a built-in model type is refused by name, and
``--help`` / ``--version`` run no plugin code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers as tf

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "idinspect-plugin-helium"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """The example plugin, installed by pip (no index, no network) into a folder of its own."""
    target = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(PLUGIN)], check=True, capture_output=True, text=True)
    return target


@pytest.fixture(scope="module")
def helium_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("helium")
    cfg = tf.HeliumConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=4, vocab_size=64, max_position_embeddings=64, pad_token_id=0)
    tf.HeliumForCausalLM(cfg).save_pretrained(folder)
    return folder


def _run(*args: str, path: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_a_model_type_is_read_by_the_plugin_that_claims_it(plugin_path, helium_dir):
    without = _run("-m", "idinspect", str(helium_dir), "--format", "json")
    assert without.returncode == 2 and "model_type 'helium' is not supported" in without.stderr
    with_plugin = _run("-m", "idinspect", str(helium_dir), "--format", "json", path=plugin_path)
    assert with_plugin.returncode == 0, with_plugin.stderr
    model = json.loads(with_plugin.stdout)["model"]
    assert model["family"] == "helium"
    assert model["adapter"] == {"name": "helium", "module": "idinspect_plugin_helium",
                                "distribution": "idinspect-plugin-helium", "version": "0.1.0"}
    text = _run("-m", "idinspect", str(helium_dir), path=plugin_path)
    assert text.returncode == 0 and "from the plugin idinspect-plugin-helium 0.1.0" in text.stdout
    listed = _run("-m", "idinspect", "families", "--state", "supported", "--format", "json", path=plugin_path)
    row = next(r for r in json.loads(listed.stdout)["families"] if r["model_type"] == "helium")
    assert row["distribution"] == "idinspect-plugin-helium" and row["module"] == "idinspect_plugin_helium"


def test_the_plugin_runs_the_adapter_contract_in_its_own_tests(plugin_path):
    """idinspect.testing.check_adapter, as a plugin author's CI runs it."""
    result = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests"), path=plugin_path, cwd=PLUGIN)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def _fake_plugin(folder: Path, entry: str, module: str | None = None) -> Path:
    """A distribution ``fakeplugin 0.1`` whose only content is an ``idinspect.adapters`` entry point (and
    optionally a module that leaves a mark when imported)."""
    info = folder / "fakeplugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[idinspect.adapters]\n{entry}\n")
    if module is not None:
        (folder / "fakeplugin_mod.py").write_text(module)
    return folder


def test_a_plugin_that_claims_a_built_in_model_type_is_refused_naming_both(tmp_path, helium_dir):
    site = _fake_plugin(tmp_path / "site", "llama = fakeplugin_mod:Adapter")
    result = _run("-m", "idinspect", str(helium_dir), path=site)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert "fakeplugin 0.1" in line and "model_type 'llama'" in line and "idinspect.adapters.llama.LlamaAdapter" in line


def test_help_and_version_run_no_plugin_code(tmp_path):
    mark = tmp_path / "imported"
    site = _fake_plugin(tmp_path / "site", "helium = fakeplugin_mod:Adapter",
                        module=f"open({str(mark)!r}, 'w').write('plugin code ran')\nAdapter = object\n")
    for args in (["--help"], ["--version"], ["inspect", "--help"], ["export", "--help"]):
        result = _run("-m", "idinspect", *args, path=site)
        assert result.returncode == 0, (args, result.stderr)
        assert not mark.exists(), args
    # a command that reads a helium model does import it, and says which plugin failed
    broken = _run("-m", "idinspect", "families", "--state", "supported", path=site)
    assert mark.exists()
    assert broken.returncode == 2 and "fakeplugin 0.1" in broken.stderr and "not point at an idinspect Adapter" in broken.stderr

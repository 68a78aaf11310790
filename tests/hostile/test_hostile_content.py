"""Hostile matrix, group 4: text and files that a checkpoint controls.

Control characters from tensor names, folder names and config strings reach the terminal, error
messages and ``audit --format text`` only as visible escapes; the GitHub job summary escapes
markdown; export copies non-weight files without following links out of the model and refuses
devices and FIFOs by name.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.hostile import (
    case_dir,
    edit_config,
    rename_tensor,
    run_case,
    set_tensor,
    visible,
)

OSC52 = "\x1b]52;c;ZXZpbA==\x07"           # write the clipboard
CLEAR = "\x1b[2J\x1b[H"                     # clear the screen
OSC8 = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"   # a hyperlink
TITLE = "\x1b]0;owned\x07"                  # set the window title
KB = "model.layers.0.self_attn.k_proj.bias"


@pytest.fixture
def biased(tiny_dir, tmp_path):
    return lambda: case_dir(tiny_dir("llama-bias"), tmp_path)


@pytest.mark.parametrize("payload", [OSC52, CLEAR, OSC8, TITLE])
def test_terminal_report_shows_config_strings_visibly(biased, tmp_path, payload):
    model = biased()
    edit_config(model, architectures=[f"LlamaForCausalLM{payload}"])
    case = run_case(tmp_path, "model", code=0)
    assert visible(case.out + case.err)
    assert "\\x1b" in case.out


@pytest.mark.parametrize("payload", [OSC52, CLEAR])
def test_error_messages_show_control_characters_visibly(biased, tmp_path, payload):
    model = biased()
    edit_config(model, model_type=f"llama{payload}")
    case = run_case(tmp_path, "model", code=2, names=("config.json", "\\x1b"))
    assert visible(case.err)


def test_folder_name_with_escapes_in_errors(tiny_dir, tmp_path):
    bad = f"m{CLEAR}"
    case_dir(tiny_dir("llama-gqa"), tmp_path, bad)
    (tmp_path / bad / "config.json").unlink()
    case = run_case(tmp_path, bad, code=2, names=("config.json", "\\x1b"))
    assert visible(case.err)


def test_tensor_name_with_escapes_in_errors(tiny_dir, tmp_path):
    model = case_dir(tiny_dir("llama-gqa", max_shard_size="20KB"), tmp_path)
    index = model / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"][f"evil{OSC52}"] = next(iter(data["weight_map"].values()))
    index.write_text(json.dumps(data))
    case = run_case(tmp_path, "model", code=2, names=("evil\\x1b]52",))
    assert visible(case.err)


def test_audit_text_shows_control_characters_visibly(tiny_dir, tmp_path):
    bad = f"m{TITLE}"
    case_dir(tiny_dir("llama-bias"), tmp_path, bad)
    case = run_case(tmp_path, "audit", bad, "--format", "text", code=0)
    assert visible(case.out + case.err) and "\\x1b" in case.out


def test_export_summary_shows_control_characters_visibly(biased, tmp_path):
    model = biased()
    (model / f"notes{OSC52}.txt").write_text("hi")
    case = run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    assert visible(case.out + case.err)
    assert (tmp_path / "out" / f"notes{OSC52}.txt").read_text() == "hi"


def test_github_step_summary_escapes_markdown(biased, tmp_path):
    model = biased()
    summary = tmp_path.parent / f"{tmp_path.name}-summary.md"
    image = "![x](https://evil.example/p.png)[link](https://evil.example)"
    os.rename(model, tmp_path / f"m{image.replace('/', '_')}")
    run_case(tmp_path, "audit", f"m{image.replace('/', '_')}", "--format", "github", code=0,
             env={"GITHUB_STEP_SUMMARY": str(summary)})
    text = summary.read_text()
    assert "![x](" not in text and "[link](" not in text and "\\!\\[x\\]" in text
    summary.unlink()


def test_json_output_escapes_control_characters(biased, tmp_path):
    model = biased()
    edit_config(model, architectures=[f"LlamaForCausalLM{OSC52}"])
    case = run_case(tmp_path, "model", "--format", "json", code=0)
    assert "\x1b" not in case.out and json.loads(case.out)["model"]["architecture"].endswith("\x07")


# --- files an export copies -------------------------------------------------------------------------

def test_export_refuses_a_link_out_of_the_model(biased, tmp_path):
    model = biased()
    (model / "tokenizer.txt").symlink_to("/etc/passwd")
    run_case(tmp_path, "export", "model", "out", code=2, names=("tokenizer.txt", "/etc/passwd", "outside"))
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_link_to_a_device(biased, tmp_path):
    model = biased()
    (model / "vocab.txt").symlink_to("/dev/zero")
    run_case(tmp_path, "export", "model", "out", code=2, names=("vocab.txt",))


def test_export_refuses_a_relative_link_out_of_the_model(biased, tmp_path):
    model = biased()
    (tmp_path / "secret.txt").write_text("secret")
    (model / "merges.txt").symlink_to("../secret.txt")
    run_case(tmp_path, "export", "model", "out", code=2, names=("merges.txt", "outside"))


def test_export_refuses_a_fifo(biased, tmp_path):
    model = biased()
    os.mkfifo(model / "pipe.txt")
    run_case(tmp_path, "export", "model", "out", code=2, names=("pipe.txt", "FIFO"))


def test_export_copies_a_link_inside_the_model_as_content(biased, tmp_path):
    model = biased()
    (model / "real.json").write_text('{"a": 1}')
    (model / "alias.json").symlink_to("real.json")
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    out = tmp_path / "out" / "alias.json"
    assert not out.is_symlink() and out.read_text() == '{"a": 1}'


def test_export_copies_hub_cache_links_into_the_repos_blobs(tiny_dir, tmp_path):
    """A hub-cache snapshot: files are links into ``models--org--name/blobs``; they are copied."""
    repo = tmp_path / "models--org--tiny"
    snap = repo / "snapshots" / ("a" * 40)
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in case_dir(tiny_dir("llama-gqa"), tmp_path, "src").iterdir():
        blob = blobs / f"blob-{f.name}"
        f.rename(blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (tmp_path / "src").rmdir()
    run_case(tmp_path, "export", str(snap), "out", code=0, expect=("out",), protected=(repo,))
    assert (tmp_path / "out" / "generation_config.json").is_file()


def test_inspect_nan_tensor_name_escapes_in_findings(biased, tmp_path):
    """Findings name tensors; a hostile name in a finding is shown visibly too."""
    model = biased()
    rename_tensor(model, KB, KB)  # untouched name; poke a NaN so that a finding names the tensor
    set_tensor(model, KB, lambda t: t.fill_(float("nan")))
    case = run_case(tmp_path, "model", code=0)
    assert KB in case.out and visible(case.out)

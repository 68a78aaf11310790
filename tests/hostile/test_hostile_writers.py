"""Hostile matrix: every writer pointed at its own input.

Each command that writes a file (fingerprint -o, compare/diff --json/--html, survey
--jsonl/--parquet/--html, inspect --json/--html, audit --output/--write-baseline) is given an
output path that is, or resolves through links to, the input checkpoint's folder or one of its
files. Each is refused before any work (idinspect.commands.paths.check_output_paths, one function
for all): exit 2, one line naming the path and the option, the input's bytes unchanged, nothing
left behind. The control: the same command writes the same file name outside the input.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.hostile import cache_snapshot, run_case

#: command -> (arguments before the output, given the model folder M) and its output options.
WRITERS = {
    "fingerprint": (lambda m: ["fingerprint", m], ["-o"]),
    "compare": (lambda m: ["compare", m, m], ["--json", "--html"]),
    "diff": (lambda m: ["diff", m, m], ["--json", "--html"]),
    "survey": (lambda m: ["survey", m, "-q", "--jsonl", "rows.jsonl"], ["--jsonl", "--parquet", "--html"]),
    "inspect": (lambda m: ["inspect", m], ["--json", "--html"]),
    "audit": (lambda m: ["audit", m], ["--output", "--write-baseline"]),
}
PAIRS = [(command, option) for command, (_, options) in WRITERS.items() for option in options]


def _target(kind: str, root: Path, base: Path) -> tuple[Path, str, str]:
    """(model argument, output path, what the message must name) for one kind of target."""
    model = root / "model"
    if kind == "snapshot blob":
        snap = cache_snapshot(base, root / "models--org--x", "0" * 40)
        return snap, (snap / "model.safetensors").resolve(), "an input file"
    shutil.copytree(base, model)
    if kind == "new file inside":
        return model, model / "out.txt", "input checkpoint"
    if kind == "config.json":
        return model, model / "config.json", "input checkpoint"
    if kind == "model.safetensors":
        return model, model / "model.safetensors", "input checkpoint"
    if kind == "through a folder link":
        (root / "alias").symlink_to("model")
        return model, root / "alias" / "config.json", "input checkpoint"
    if kind == "a link to config.json":
        (root / "out").mkdir()
        (root / "out" / "report").symlink_to(model / "config.json")
        return model, root / "out" / "report", "input checkpoint"
    if kind == "model named by its config.json":
        return model / "config.json", model / "out.txt", "input checkpoint"
    raise ValueError(kind)


KINDS = ["new file inside", "config.json", "model.safetensors", "through a folder link", "a link to config.json",
         "snapshot blob", "model named by its config.json"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command,option", PAIRS)
def test_no_writer_writes_over_its_input(tiny_dir, tmp_path, command, option, kind):
    model, out, words = _target(kind, tmp_path, tiny_dir("llama-gqa"))
    args, _ = WRITERS[command]
    case = run_case(tmp_path, *args(model), option, out, code=2, names=(str(out), option, words))
    assert "outputs never touch their input" in case.err
    if kind == "a link to config.json":
        assert (tmp_path / "out" / "report").is_symlink()


def test_an_input_file_is_never_an_output(tiny_dir, tmp_path):
    """compare's fingerprint argument and survey's --from list are inputs too."""
    model = tiny_dir("llama-gqa")
    (tmp_path / "in").mkdir()
    fp = tmp_path / "in" / "fp.json"
    run_case(tmp_path, "fingerprint", model, "-o", fp, code=0, one_line=False, protected=(model,))
    for option in ("--json", "--html"):
        run_case(tmp_path, "compare", fp, model, option, fp, code=2, names=(str(fp), option, "an input file"))
    run_case(tmp_path, "fingerprint", fp, "-o", fp, code=2, names=(str(fp), "--output", "an input file"))
    run_case(tmp_path, "diff", model, model, "--json", fp.parent / "." / "fp.json", code=0, one_line=False,
             protected=(model,))                                  # diff's inputs are the models: fp.json is no input
    listing = tmp_path / "in" / "models.txt"
    listing.write_text(f"{model}\n")
    for option in ("--jsonl", "--html"):
        run_case(tmp_path, "survey", "--from", listing, option, listing, code=2,
                 names=(str(listing), option, "an input file"))


@pytest.mark.parametrize("command,option", PAIRS)
def test_each_writer_still_writes_outside_its_input(tiny_dir, tmp_path, command, option):
    """The control: the guard refuses the input, not the writer."""
    model = tmp_path / "model"
    shutil.copytree(tiny_dir("llama-gqa"), model)
    args, _ = WRITERS[command]
    out = tmp_path / "out.file"
    case = run_case(tmp_path, *args(model), option, out, code=0, one_line=False, expect=("out.file", "rows.jsonl"),
                    protected=(model,))
    assert out.is_file() and out.stat().st_size > 0, case.err
    if option in ("--json", "-o"):
        json.loads(out.read_text())
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out.file")]


@pytest.mark.parametrize("command,option", [("audit", "--output"), ("inspect", "--json"), ("fingerprint", "-o"),
                                            ("compare", "--json"), ("diff", "--html")])
def test_a_relative_name_run_inside_the_input_is_refused(tiny_dir, tmp_path, command, option):
    """``cd model && idinspect audit . --output -``: '-' is a file name there, in the input."""
    model = tmp_path / "model"
    shutil.copytree(tiny_dir("llama-gqa"), model)
    args, _ = WRITERS[command]
    run_case(model, *args("."), option, "-", code=2, names=("-", option, "input checkpoint"), protected=(model,))

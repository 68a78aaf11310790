"""`idinspect --help` and `--version` answer without importing torch (a second of a 2-core machine)."""

import os
import subprocess
import sys

import pytest

PROBE = ("import sys\n"
         "from idinspect.cli import main\n"
         "try:\n"
         "    main(sys.argv[1:])\n"
         "except SystemExit:\n"
         "    pass\n"
         "heavy = sorted(m for m in ('torch', 'transformers', 'safetensors', 'rich') if m in sys.modules)\n"
         "print('HEAVY', heavy)\n")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["-h"]])
def test_help_and_version_import_no_torch(args):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "HEAVY []", out


def test_top_level_help_lists_every_command_and_the_common_report_options():
    from idinspect.commands import COMMANDS

    out = subprocess.run([sys.executable, "-m", "idinspect", "--help"], capture_output=True, text=True).stdout
    for name in COMMANDS:
        assert f"\n  {name} " in out, name
    for option in ("--heads", "--html", "--prove"):
        assert option in out, option


def test_import_idinspect_is_lazy_but_complete():
    code = ("import sys, idinspect\n"
            "assert 'torch' not in sys.modules\n"
            "names = [n for n in idinspect.__all__ if n != '__version__']\n"
            "missing = [n for n in names if getattr(idinspect, n, None) is None]\n"
            "print(missing, callable(idinspect.export), callable(idinspect.verify))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] True True", out


def test_command_line_asks_torch_for_huge_pages_unless_the_user_said_otherwise(monkeypatch):
    """entry.run sets torch's THP_MEM_ALLOC_ENABLE before torch loads; an explicit value is kept."""
    from idinspect import entry

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    entry.use_huge_pages_for_tensors()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    entry.use_huge_pages_for_tensors()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"


def _refusal_cases(tmp_path):
    (tmp_path / "pickles").mkdir()
    (tmp_path / "pickles" / "pytorch_model.bin").write_bytes(b"\x80\x04not opened")
    (tmp_path / "empty").mkdir()
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + b"\0" * 20)
    (tmp_path / "config.json").write_text("{}")
    missing = str(tmp_path / "missing")
    return [([missing], "no such file or directory"),
            (["verify", missing, str(tmp_path / "empty")], "no such file or directory"),
            (["verify", str(tmp_path / "empty"), missing], "no model.safetensors"),
            (["diff", missing, missing], "no such file or directory"),
            ([str(tmp_path / "config.json")], "got a file; pass its folder"),
            ([str(tmp_path / "pickles")], "never unpickles"),
            (["export", str(tmp_path / "m.gguf"), str(tmp_path / "out")], "refuses a GGUF input"),
            (["export", str(tmp_path / "empty"), str(tmp_path / "out")], "no model.safetensors")]


def test_refusals_the_file_system_decides_come_before_torch(tmp_path):
    """A missing path, a file for a folder, a pickle-only or empty folder, a GGUF given to export:
    one line, exit 2, and neither torch nor transformers imported (they cost seconds)."""
    for args, message in _refusal_cases(tmp_path):
        res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True)
        assert message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
        assert res.stdout.strip().splitlines()[-1] == "HEAVY ['rich']", (args, res.stdout)
    assert not (tmp_path / "out").exists()


def test_dir_lists_each_public_name_once_and_no_future_flag():
    code = ("import idinspect\n"
            "idinspect.load; idinspect.verify\n"
            "d = dir(idinspect)\n"
            "print(len(d) == len(set(d)), 'annotations' in d, set(idinspect.__all__) <= set(d))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True False True", out


@pytest.mark.parametrize("command", ["inspect", "export", "verify", "diff", "compare", "fingerprint", "audit", None])
def test_help_names_every_model_form(command):
    args = [sys.executable, "-m", "idinspect", *([command] if command else []), "--help"]
    out = " ".join(subprocess.run(args, capture_output=True, text=True, check=True).stdout.split())
    for form in ("org/name[@revision]", "snapshot folder", "GGUF", ".gguf", "pkg:PACKAGE"):
        assert form in out, (command, form)

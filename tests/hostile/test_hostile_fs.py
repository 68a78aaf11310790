"""Hostile matrix, group 3: the file system (OUT names and places, --force, claims and races,
stale temporary folders, report paths, links, permissions, a full disk).

Permission cases run in a child process without the capabilities that let root read and write
through any mode bits (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH dropped from its bounding set before
exec); the full disk is a file-size limit (``ulimit -f``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile import case_dir, run_case, tree_hashes

OUTS = {"dot": ".", "dotdot": "..", "long": "x" * 250, "trailing-dot": "sub/.."}


@pytest.fixture
def model(tiny_dir, tmp_path):
    return case_dir(tiny_dir("llama-gqa"), tmp_path)


@pytest.mark.parametrize("case", list(OUTS))
def test_out_names_that_cannot_be_an_export(model, tmp_path, case):
    (tmp_path / "sub").mkdir()
    case_ = run_case(tmp_path, "export", "model", OUTS[case], "--force", code=2)
    assert not [p for p in tmp_path.parent.iterdir() if "idinspect-" in p.name]
    assert not [p for p in tmp_path.iterdir() if "idinspect-" in p.name]
    assert "OUT" in case_.err or "too long" in case_.err


def test_out_under_a_regular_file(model, tmp_path):
    (tmp_path / "afile").write_text("mine")
    run_case(tmp_path, "export", "model", "afile/out", code=2, names=("afile", "is a file"))
    assert (tmp_path / "afile").read_text() == "mine"


def test_existing_out_needs_force(model, tmp_path):
    (tmp_path / "out").mkdir()
    run_case(tmp_path, "export", "model", "out", code=2, names=("out", "--force"))


def test_force_refuses_a_users_folder(model, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("precious")
    run_case(tmp_path, "export", "model", "out", "--force", code=2, names=("out", "not a checkpoint"))
    assert (tmp_path / "out" / "notes.txt").read_text() == "precious"


def test_force_refuses_a_checkpoint_idinspect_did_not_write(model, tmp_path, tiny_dir):
    shutil.copytree(tiny_dir("llama-gqa"), tmp_path / "out")
    run_case(tmp_path, "export", "model", "out", "--force", code=2, names=("out", "provenance"))


def test_force_refuses_a_file_and_a_link(model, tmp_path):
    (tmp_path / "out").write_text("mine")
    run_case(tmp_path, "export", "model", "out", "--force", code=2, names=("out", "is a file"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to("elsewhere")
    run_case(tmp_path, "export", "model", "link", "--force", code=2, names=("link", "symbolic link"))


def test_force_replaces_an_empty_folder_and_its_own_export(model, tmp_path):
    (tmp_path / "out").mkdir()
    run_case(tmp_path, "export", "model", "out", "--force", code=0, protected=(tmp_path / "model",))
    first = tree_hashes(tmp_path / "out")
    run_case(tmp_path, "export", "model", "out", "--force", code=0, protected=(tmp_path / "model",))
    assert tree_hashes(tmp_path / "out") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]


def _appear_before_publish(monkeypatch, action):
    """Run ``action`` just before the finished export is renamed to OUT (config.json is the last file)."""
    import idinspect.exporting.pipeline as pipeline

    original = pipeline.config_text

    def hook(*args, **kwargs):
        action()
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "config_text", hook)


def test_folder_appearing_at_out_during_export_is_kept(model, tmp_path, monkeypatch):
    def user():
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "mine.txt").write_text("precious")

    _appear_before_publish(monkeypatch, user)
    run_case(tmp_path, "export", "model", "out", code=2, names=("out", "appeared"), expect=("out",))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]


def test_two_exports_to_one_out_do_not_both_succeed(model, tmp_path, monkeypatch):
    from tests.support.cli import run_cli

    seen = {}

    def rival():
        monkeypatch.undo()
        seen["rival"] = run_cli("export", str(tmp_path / "model"), str(tmp_path / "out")).code

    _appear_before_publish(monkeypatch, rival)
    run_case(tmp_path, "export", "model", "out", code=2, names=("appeared",), expect=("out",))
    assert seen["rival"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("with_owner_file", [True, False])
def test_stale_temp_folders_of_dead_owners_are_removed(model, tmp_path, with_owner_file):
    pid = _dead_pid()
    stale = tmp_path / f".out.idinspect-tmp-{pid}-0badf00d"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"\0" * 1000)
    if with_owner_file:
        (stale / ".idinspect-owner").write_text(json.dumps({"tool": "idinspect", "pid": pid, "start": None,
                                                            "host": os.uname().nodename}))
    live = tmp_path / ".out.idinspect-tmp-1-0000beef"      # pid 1 is alive: never touched
    live.mkdir()
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",), protected=(tmp_path / "model",))
    assert not stale.exists() and live.exists()


def test_reports_never_overwrite_or_enter_the_input(model, tmp_path):
    run_case(tmp_path, "model", "--html", "model/config.json", code=2, names=("model/config.json", "input"))
    run_case(tmp_path, "model", "--json", "model/report.json", code=2, names=("model/report.json", "input"))
    run_case(tmp_path, "audit", "model", "--format", "json", "--output", "model/model.safetensors", code=2,
             names=("model/model.safetensors", "input"))


def test_report_into_a_missing_folder_or_onto_a_folder(model, tmp_path):
    run_case(tmp_path, "model", "--json", "nowhere/r.json", code=2, names=("nowhere",))
    (tmp_path / "adir").mkdir()
    run_case(tmp_path, "model", "--html", "adir", code=2, names=("adir",), one_line=False)  # click's usage error


@pytest.mark.parametrize("case", ["loop", "dangling", "config-loop", "config-dir", "weights-dir"])
def test_links_and_wrong_kinds_in_the_model(model, tmp_path, case):
    if case == "loop":
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")
        run_case(tmp_path, "a", code=2, names=("a", "loop"))
    elif case == "dangling":
        (tmp_path / "gone").symlink_to("nothing-here")
        run_case(tmp_path, "gone", code=2, names=("gone",))
    elif case == "config-loop":
        (model / "config.json").unlink()
        (model / "config.json").symlink_to("config.json")
        run_case(tmp_path, "model", code=2, names=("config.json", "loop"))
    elif case == "config-dir":
        (model / "config.json").unlink()
        (model / "config.json").mkdir()
        run_case(tmp_path, "model", code=2, names=("config.json",))
    else:
        (model / "model.safetensors").unlink()
        (model / "model.safetensors").mkdir()
        run_case(tmp_path, "model", code=2, names=("model.safetensors",))


# --- permissions and a full disk: in a child process --------------------------------------------

def _drop_dac() -> None:
    """As root: lose the right to ignore file modes (prctl PR_CAPBSET_DROP of caps 1 and 2)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _child(root: Path, *args, as_nobody: bool = False, fsize: int | None = None) -> subprocess.CompletedProcess:
    def setup():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if as_nobody and os.geteuid() == 0:
            _drop_dac()

    env = {**os.environ, "HOME": str(root), "IDINSPECT_NO_FAST_EXIT": "1"}
    return subprocess.run([sys.executable, "-m", "idinspect", *args], cwd=root, env=env, preexec_fn=setup,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def shared_root(tiny_dir, tmp_path):
    """A case folder; its modes are restored afterwards so that pytest can remove it."""
    root = tmp_path / "case"
    root.mkdir()
    shutil.copytree(tiny_dir("llama-gqa"), root / "model")
    yield root
    subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)


def _check_child(res, root: Path, *names: str) -> None:
    both = res.stdout + res.stderr
    assert res.returncode == 2, both
    assert "Traceback" not in both and "internal error" not in both, both
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for name in names:
        assert name in res.stderr, res.stderr
    assert not [p for p in root.rglob("*idinspect-tmp-*")], list(root.rglob("*"))


@pytest.mark.parametrize("case", ["unreadable-dir", "unreadable-config", "readonly-out-parent", "readonly-output-dir"])
def test_permissions(shared_root, case):
    root = shared_root
    if case == "unreadable-dir":
        os.chmod(root / "model", 0o000)
        res = _child(root, "model", as_nobody=True)
        _check_child(res, root, "model", "permission denied")
    elif case == "unreadable-config":
        os.chmod(root / "model" / "config.json", 0o000)
        res = _child(root, "model", as_nobody=True)
        _check_child(res, root, "config.json", "permission denied")
        assert "no such file" not in res.stderr and "not valid JSON" not in res.stderr
    elif case == "readonly-out-parent":
        (root / "ro").mkdir(mode=0o555)
        res = _child(root, "export", "model", "ro/out", as_nobody=True)
        _check_child(res, root, "ro", "permission denied")
    else:
        (root / "ro").mkdir(mode=0o555)
        res = _child(root, "audit", "model", "--format", "json", "--output", "ro/a.json", as_nobody=True)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "ro/a.json" in res.stderr and "permission denied" in res.stderr, res.stderr


def test_full_disk_during_export(shared_root):
    res = _child(shared_root, "export", "model", "out", fsize=20_000)
    _check_child(res, shared_root, "out")
    assert not (shared_root / "out").exists()


def test_a_signal_just_after_the_temporary_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """SIGTERM/SIGHUP raise in the main thread, possibly between creating ``.OUT.idinspect-tmp-*``
    and handing it to the export's cleanup: make_temp removes it itself."""
    from idinspect.entry import Terminated
    from idinspect.exporting import claim

    def interrupted():
        raise Terminated(15)

    monkeypatch.setattr(claim, "_owner", interrupted)
    with pytest.raises(Terminated):
        claim.make_temp(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []

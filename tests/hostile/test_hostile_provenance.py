"""Hostile matrix: an export records its source's commit only for bytes verified to be that commit's.

Exports from the local hub stand-in (tests/support/hub_server.py) through huggingface_hub's own
``snapshot_download`` into a real hub cache, then the cache or the served bytes are spoiled: a blob
edited after the download, bytes served that differ from the API's sha256, a snapshot folder copied
elsewhere under a commit's name, a link to a blob not named by a digest. The export either refuses
(exit 2, one line) or completes without recording the commit (``revision`` null in every shard's
``idinspect`` provenance and in the record, with a note saying why); a clean cache records it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.sources.test_remote import _clean, cache, hub  # noqa: F401 - fixtures: local hub, clean settings, cache folder
from tests.support.cli import run_cli
from tests.support.hostile import cache_snapshot, run_case
from tests.support.hub_server import Fault, served_files

REPO = "org/tiny-llama"


def _recorded(out: Path) -> set:
    revisions = set()
    for shard in sorted(out.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as h:
            revisions.add(json.loads(h.metadata()["idinspect"])["revision"])
    return revisions


def _snapshot(cache: Path, commit: str) -> Path:
    return cache / "models--org--tiny-llama" / "snapshots" / commit


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _export(root: Path, source, cache: Path, *extra) -> dict:
    case = run_case(root, "export", source, root / "out", "--cache-dir", cache, "--format", "json", *extra,
                    code=0, one_line=False, expect=("out", "hf-cache"), protected=(root / "served",))
    return json.loads(case.out)


@pytest.fixture
def served(tiny_dir, tmp_path) -> Path:
    dst = tmp_path / "served"
    shutil.copytree(tiny_dir("llama-gqa"), dst)
    return dst


def test_a_clean_download_records_its_commit(hub, served, cache, tmp_path):
    commit = hub.add_repo(REPO, served_files(served))
    record = _export(tmp_path, REPO, cache)
    assert record["revision"] == commit and record["revision_note"] is None
    assert _recorded(tmp_path / "out") == {commit}


SPOILS = {
    "weights blob edited": lambda snap: _flip_last_byte(snap / "model.safetensors"),
    "config blob edited": lambda snap: (snap / "config.json").resolve().write_text(
        (snap / "config.json").read_text().replace('"llama"', '"llama" ', 1)),
}


@pytest.mark.parametrize("spoil", list(SPOILS))
def test_bytes_edited_in_the_cache_drop_the_commit(hub, served, cache, tmp_path, spoil):
    commit = hub.add_repo(REPO, served_files(served))
    _export(tmp_path, REPO, cache)
    shutil.rmtree(tmp_path / "out")
    SPOILS[spoil](_snapshot(cache, commit))
    for source, extra in ((REPO, ("--offline",)), (_snapshot(cache, commit), ())):   # hub id offline, and as a path
        record = _export(tmp_path, source, cache, *extra)
        assert record["revision"] is None and _recorded(tmp_path / "out") == {None}
        assert "do not match the digest" in record["revision_note"] and commit in record["revision_note"]
        shutil.rmtree(tmp_path / "out")


def test_bytes_served_unlike_the_hubs_digest_never_record_the_commit(hub, served, cache, tmp_path):
    commit = hub.add_repo(REPO, served_files(served))
    hub.faults.append(Fault("corrupt_file", host="cdn", path=""))
    result = run_cli("export", REPO, tmp_path / "out", "--cache-dir", cache, "--format", "json")
    both = result.stdout + result.stderr
    assert result.code in (0, 2) and "Traceback" not in both and "internal error" not in both, both
    if result.code == 0:                       # accepted by the download: the provenance must not vouch for it
        record = json.loads(result.stdout)
        assert record["revision"] is None and _recorded(tmp_path / "out") == {None}
        assert commit in record["revision_note"] and "do not match" in record["revision_note"]
        assert "no revision recorded" in result.stderr
    else:                                      # refused by a sha256 check of the download: one line, nothing written
        assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
        assert not (tmp_path / "out").exists()


def test_a_copied_snapshot_folder_does_not_vouch_for_its_name(served, tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    fake = tmp_path / "hf-cache" / "models--org--x" / "snapshots" / commit
    shutil.copytree(served, fake)                                # a folder named like a snapshot, no blobs
    record = json.loads(run_case(tmp_path, "export", fake, tmp_path / "out", "--format", "json", code=0,
                                 one_line=False, expect=("out",), protected=(tmp_path / "served",)).out)
    assert record["revision"] is None and "not a hub-cache blob" in record["revision_note"]
    assert _recorded(tmp_path / "out") == {None}


def test_a_link_to_a_blob_not_named_by_a_digest(served, tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf-cache" / "models--org--x"
    fake = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    fake.mkdir(parents=True)
    for f in served.iterdir():
        shutil.copy(f, repo / "blobs" / f"{f.name}.blob")
        (fake / f.name).symlink_to(repo / "blobs" / f"{f.name}.blob")
    record = json.loads(run_case(tmp_path, "export", fake, tmp_path / "out", "--format", "json", code=0,
                                 one_line=False, expect=("out",), protected=(tmp_path / "served",)).out)
    assert record["revision"] is None and "not to a blob named by its digest" in record["revision_note"]


def test_an_intact_snapshot_folder_given_as_a_path_records_its_commit(served, tmp_path):
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    snap = cache_snapshot(served, tmp_path / "hf-cache" / "models--org--x", commit)
    record = json.loads(run_case(tmp_path, "export", snap, tmp_path / "out", "--format", "json", code=0,
                                 one_line=False, expect=("out",), protected=(tmp_path / "served",)).out)
    assert record["revision"] == commit and record["revision_note"] is None
    assert _recorded(tmp_path / "out") == {commit}

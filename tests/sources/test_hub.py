"""Hub ids: what is sent to ``huggingface_hub.snapshot_download`` and what comes back.

A fake ``snapshot_download`` (patched where idinspect imports it) records the call or raises the
real huggingface_hub error classes, built on huggingface_hub's own HTTP library. One group of
tests runs the real resolution code offline over a hand-built cache (``models--org--name``,
``refs/main``, ``snapshots/<sha>`` symlinked to ``blobs``). Nothing here touches the network.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors

import idinspect
from idinspect import cli as cli_module
from idinspect.sources import hub, remote_pin
from tests.support.cli import run_cli

SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = "org/tiny-llama"


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    """Same results whatever the environment says: online unless a test turns offline on, no
    token from the environment, and no --debug left on by an earlier in-process run."""
    monkeypatch.setitem(cli_module._DEBUG, "on", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def snapshot(tiny_dir, tmp_path) -> Path:
    """A cache-style snapshot folder holding a tiny sharded Llama checkpoint."""
    folder = tmp_path / "cache" / "models--org--tiny-llama" / "snapshots" / SHA
    shutil.copytree(tiny_dir("llama-gqa", max_shard_size="20KB"), folder)
    return folder


class FakeHub:
    """Stands in for snapshot_download: records each call, returns ``folder`` or raises ``error``."""

    def __init__(self, folder: Path | None = None, error: BaseException | None = None):
        self.folder, self.error, self.calls = folder, error, []

    def __call__(self, repo_id, **kwargs):
        self.calls.append({"repo_id": repo_id, **kwargs})
        if self.error is not None:
            raise self.error
        return str(self.folder)


def refuse_partial_read(*args, **kwargs):
    raise AssertionError("sent to the hub (partial read)")


@pytest.fixture
def fake_hub(monkeypatch):
    def install(folder: Path | None = None, error: BaseException | None = None) -> FakeHub:
        fake = FakeHub(folder, error)
        monkeypatch.setattr(hub, "snapshot_download", fake)
        monkeypatch.setattr(remote_pin, "resolve_commit", refuse_partial_read)
        return fake

    return install


def one_line_error(r, match: str) -> str:
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.search(match, lines[0]), lines[0]
    return lines[0]


def response(status: int) -> httpx2.Response:
    return httpx2.Response(status, request=httpx2.Request("GET", f"https://huggingface.co/api/models/{REPO}"))


# what goes to snapshot_download (--download: whole files, as export and verify fetch them) -----------------------------------------------------------------

def test_hub_id_downloads_only_config_and_safetensors(fake_hub, snapshot):
    fake = fake_hub(snapshot)
    r = run_cli(REPO, "--download", "--format", "json")
    assert r.code == 0, r.stderr
    (call,) = fake.calls
    assert call["repo_id"] == REPO and call["revision"] is None and call["local_files_only"] is False
    patterns = call["allow_patterns"]
    wanted = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-00001-of-00003.safetensors"]
    unwanted = ["pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "model.pt", "tf_model.h5",
                "flax_model.msgpack", "consolidated.safetensors", "original/consolidated.00.pth",
                "onnx/model.onnx", "tokenizer.json", "README.md", "modeling_custom.py"]
    for name in wanted:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name
    for name in unwanted:
        assert not any(fnmatch.fnmatch(name, p) for p in patterns), name
    model = json.loads(r.stdout)["model"]
    assert model["source"] == REPO and model["revision"] == SHA     # the resolved commit
    assert model["model_type"] == "llama" and model["kv_heads"] == 2


@pytest.mark.parametrize("args, revision", [([f"{REPO}@v1.0"], "v1.0"), ([REPO, "--revision", "dev"], "dev"),
                                            ([f"{REPO}@{SHA}", "--revision", SHA], SHA)])
def test_revision_is_passed(args, revision, fake_hub, snapshot):
    fake = fake_hub(snapshot)
    r = run_cli(*args, "--download", "--format", "json")
    assert r.code == 0, r.stderr
    assert fake.calls[0]["revision"] == revision and fake.calls[0]["repo_id"] == REPO
    assert json.loads(r.stdout)["model"]["revision"] == SHA


def test_revision_given_twice_differently(fake_hub, snapshot):
    fake = fake_hub(snapshot)
    one_line_error(run_cli(f"{REPO}@a", "--revision", "b"), r"revision given twice \('a' and --revision 'b'\)")
    assert fake.calls == []


def test_token_from_option_and_environment(fake_hub, snapshot, monkeypatch):
    fake = fake_hub(snapshot)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert run_cli(REPO, "--download", "--format", "json").code == 0
    assert run_cli(REPO, "--download", "--token", "hf_option", "--format", "json").code == 0
    monkeypatch.setenv("HF_TOKEN", "hf_environment")
    assert run_cli(REPO, "--download", "--format", "json").code == 0
    assert [c["token"] for c in fake.calls] == [None, "hf_option", "hf_environment"]


def test_cache_dir_and_offline_are_passed(fake_hub, snapshot, tmp_path):
    fake = fake_hub(snapshot)
    assert run_cli(REPO, "--download", "--cache-dir", str(tmp_path / "c"), "--offline", "--format", "json").code == 0
    assert fake.calls[0]["cache_dir"] == str(tmp_path / "c") and fake.calls[0]["local_files_only"] is True


def test_library_load_passes_everything(fake_hub, snapshot, tmp_path):
    fake = fake_hub(snapshot)
    model = idinspect.load(f"{REPO}@main", token="t", cache_dir=tmp_path, local_files_only=True, whole_files=True)
    assert model.provenance.kind == "hub" and model.provenance.revision == SHA
    assert model.provenance.path == snapshot
    assert fake.calls[0] == {"repo_id": REPO, "revision": "main", "token": "t", "cache_dir": str(tmp_path),
                             "local_files_only": True, "allow_patterns": hub.INSPECT_PATTERNS}


def test_shards_with_unusual_names_are_fetched_by_name(fake_hub, snapshot):
    """An index naming shards the patterns do not match: a second call asks for exactly those."""
    for i, shard in enumerate(sorted(snapshot.glob("model-*.safetensors"))):
        shard.rename(snapshot / f"weights-part{i}.safetensors")
    index_path = snapshot / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    names = sorted(set(index["weight_map"].values()))
    index["weight_map"] = {k: f"weights-part{names.index(v)}.safetensors" for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    hidden = snapshot.parent / "hidden"
    hidden.mkdir()
    for f in snapshot.glob("weights-part*.safetensors"):   # "not downloaded yet"
        f.rename(hidden / f.name)

    def download(repo_id, **kwargs):
        fake.calls.append({"repo_id": repo_id, **kwargs})
        for name in kwargs["allow_patterns"]:
            if (hidden / name).exists():
                (hidden / name).rename(snapshot / name)
        return str(snapshot)

    fake = fake_hub(snapshot)
    hub.snapshot_download = download  # monkeypatched attribute; restored by the fixture
    model = idinspect.load(REPO, whole_files=True)
    assert len(fake.calls) == 2
    assert fake.calls[1]["allow_patterns"] == [f"weights-part{i}.safetensors" for i in range(len(names))]
    assert fake.calls[1]["revision"] == SHA          # pinned to the commit the first call resolved
    assert model.num_layers == 2 and model.layer(1).n_kv_heads == 2


# never to the hub -------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["./missing", "../missing/model", "/no/such/checkpoint", "~/no-such-checkpoint",
                                    "a/b/c", "models\\llama", "C:\\models\\llama", "C:/models/llama",
                                    "exprot", "org/", "/org/name", "my-model/", "model.safetensors",
                                    "llama.gguf", "org/name/config.json", "pytorch_model.bin"])
def test_path_like_input_never_reaches_the_hub(source, fake_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = fake_hub(error=AssertionError("sent to the hub"))
    r = run_cli(source)
    assert r.code == 2 and "Traceback" not in r.stderr
    assert "sent to the hub" not in r.stderr
    assert fake.calls == []


def test_existing_relative_folder_shaped_like_a_hub_id_is_local(fake_hub, snapshot, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(snapshot, tmp_path / "org" / "tiny-llama")
    fake = fake_hub(error=AssertionError("sent to the hub"))
    r = run_cli(REPO, "--format", "json")
    assert r.code == 0, r.stderr
    assert fake.calls == []
    assert json.loads(r.stdout)["model"]["revision"] is None


def test_hub_id_shaped_input_does_reach_the_hub(fake_hub, tmp_path, monkeypatch):
    """The positive control for the test above: the fake is really in the path."""
    monkeypatch.chdir(tmp_path)
    fake = fake_hub(error=hf_errors.RepositoryNotFoundError("404", response=response(404)))
    one_line_error(run_cli("org/name", "--download"), r"^error: org/name: not a local directory, and no such model on the hub")
    assert [c["repo_id"] for c in fake.calls] == ["org/name"]


@pytest.mark.parametrize("source", ["gpt2", "bert-base-uncased", "t5-small@main"])
def test_hub_ids_without_an_organisation_are_hub_ids(source, fake_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = fake_hub(error=hf_errors.RepositoryNotFoundError("404", response=response(404)))
    name = source.split("@")[0]
    one_line_error(run_cli(source, "--download"), rf"^error: {name}: not a local directory, and no such model on the hub")
    assert [c["repo_id"] for c in fake.calls] == [name]


def test_a_mistyped_local_path_says_so_without_the_network(fake_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-llama").mkdir()
    fake = fake_hub(error=AssertionError("sent to the hub"))
    for typo in ("./tiny-lama", "tiny-lama/", "models/tiny/llama", "tiny-lama/model.safetensors"):
        one_line_error(run_cli(typo), rf"^error: {re.escape(typo)}: no such file or directory")
    assert fake.calls == []


# hub failures -----------------------------------------------------------------------------------

HUB_ERRORS = {
    "gated": (hf_errors.GatedRepoError("403 gated", response=response(403)),
              rf"{REPO} is gated: accept its terms at https://huggingface.co/{REPO} and pass --token or set HF_TOKEN"),
    "not found": (hf_errors.RepositoryNotFoundError("404", response=response(404)),
                  r"no such model on the hub \(if it is private, pass --token or set HF_TOKEN\)"),
    "bad revision": (hf_errors.RevisionNotFoundError("404 revision", response=response(404)),
                     r"no revision 'nope' on the hub; use a branch, tag or commit sha"),
    "unauthorized": (hf_errors.HfHubHTTPError("401", response=response(401)), r"refused the token \(HTTP 401\)"),
    "server error": (hf_errors.HfHubHTTPError("500 Server Error\nmore", response=response(500)),
                     r"the hub answered HTTP 500 \(500 Server Error\); retry later"),
    "no network": (httpx2.ConnectError("[Errno -3] name resolution failed", request=response(200).request),
                   r"network error while downloading \(ConnectError: .*name resolution failed\)"),
    "invalid id": (hf_errors.HFValidationError("Cannot have -- or .. in repo_id"), r"is not a valid hub id"),
    "incomplete": (hf_errors.IncompleteSnapshotError("2 file(s) are missing", snapshot_path="/x"),
                   r"the cached snapshot is incomplete and the hub cannot be reached"),
}


@pytest.mark.parametrize("case", sorted(HUB_ERRORS))
def test_hub_errors_are_one_line(case, fake_hub):
    error, match = HUB_ERRORS[case]
    fake_hub(error=error)
    args = [f"{REPO}@nope"] if case == "bad revision" else [REPO]
    one_line_error(run_cli(*args, "--download"), match)


def test_unreachable_hub_without_cache(fake_hub):
    error = hf_errors.LocalEntryNotFoundError("Got: ConnectError ... cannot find the appropriate snapshot folder")
    error.__cause__ = httpx2.ConnectError("down")
    fake_hub(error=error)
    one_line_error(run_cli(REPO, "--download"), rf"{REPO}: the hub cannot be reached \(ConnectError\) and it is not in the local "
                                  r"cache .*set HF_HUB_OFFLINE=1")


def test_offline_without_cache(fake_hub):
    fake_hub(error=hf_errors.LocalEntryNotFoundError("Cannot find an appropriate cached snapshot folder"))
    one_line_error(run_cli(REPO, "--download", "--offline"), rf"{REPO} is not in the local cache .* offline mode is on")


def test_other_exceptions_are_not_disguised():
    assert hub.hub_error(KeyError("x"), REPO, None, offline=False) is None


# the real resolution code, offline, over a hand-built cache ---------------------------------------

@pytest.fixture
def no_network(monkeypatch) -> list:
    """Every HTTP request huggingface_hub's client would send; the tests expect none."""
    sent = []

    def refuse(self, request):
        sent.append(str(request.url))
        raise httpx2.ConnectError("the test forbids network access", request=request)

    monkeypatch.setattr(httpx2.HTTPTransport, "handle_request", refuse)
    return sent


@pytest.fixture
def hf_cache(tiny_dir, tmp_path, no_network) -> Path:
    """``models--org--tiny-llama`` with blobs, a snapshot of symlinks and ``refs/main`` -> SHA."""
    cache = tmp_path / "hf-cache"
    repo = cache / "models--org--tiny-llama"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / SHA
    snap.mkdir(parents=True)
    for f in sorted(tiny_dir("llama-gqa", max_shard_size="20KB").iterdir()):
        blob = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, repo / "blobs" / blob)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", blob))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)   # huggingface_hub writes no newline
    return cache


def test_cache_resolves_offline_with_local_files_only(hf_cache, no_network):
    model = idinspect.load(REPO, cache_dir=hf_cache, local_files_only=True)
    assert no_network == []
    assert model.provenance.revision == SHA
    assert model.provenance.path == hf_cache / "models--org--tiny-llama" / "snapshots" / SHA
    assert model.layer(0).n_kv_heads == 2


@pytest.mark.parametrize("ref", ["", "@main", f"@{SHA}"])
def test_cache_through_the_cli_with_hf_hub_offline(ref, hf_cache, no_network, monkeypatch):
    """HF_HUB_OFFLINE as huggingface_hub reads it: no request leaves, the cache answers."""
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert hub.is_offline()
    r = run_cli(REPO + ref, "--cache-dir", str(hf_cache), "--format", "json")
    assert r.code == 0, r.stderr
    assert no_network == []
    model = json.loads(r.stdout)["model"]
    assert model["revision"] == SHA and model["source"] == REPO and model["layers"] == 2


def test_cache_miss_offline(hf_cache, no_network, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    one_line_error(run_cli("org/not-cached", "--cache-dir", str(hf_cache)),
                   rf"org/not-cached is not in the local cache \({re.escape(str(hf_cache))}\) and offline mode is on")
    one_line_error(run_cli(f"{REPO}@v2", "--cache-dir", str(hf_cache), "--offline"),
                   rf"{REPO}@v2 is not in the local cache .* offline mode is on")
    assert no_network == []


def test_snapshot_folder_as_a_path_records_its_commit(hf_cache, fake_hub):
    fake = fake_hub(error=AssertionError("sent to the hub"))
    snap = hf_cache / "models--org--tiny-llama" / "snapshots" / SHA
    r = run_cli(str(snap), "--format", "json")
    assert r.code == 0, r.stderr
    model = json.loads(r.stdout)["model"]
    assert model["revision"] == SHA and model["source"] == str(snap)
    assert fake.calls == []


def test_unreachable_hub_falls_back_to_the_cache(hf_cache, no_network, monkeypatch):
    """Online mode with the network down: huggingface_hub tries, fails, and answers from the cache.
    (Also the positive control for ``no_network``: the request is really intercepted.)"""
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    r = run_cli(REPO, "--cache-dir", str(hf_cache), "--format", "json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["model"]["revision"] == SHA
    assert any("/api/models/org/tiny-llama" in url for url in no_network), no_network


def test_download_progress_is_fed_when_progress_is_shown(fake_hub, snapshot):
    fake = fake_hub(snapshot)
    assert run_cli(REPO, "--download", "--progress", "always").code == 0
    assert run_cli(REPO, "--download", "--progress", "never").code == 0
    assert fake.calls[0].get("tqdm_class") is not None      # the reporter's bar class
    assert "tqdm_class" not in fake.calls[1]

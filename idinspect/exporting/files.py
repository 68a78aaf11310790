"""The non-weight files of an export: copied byte for byte, config.json's dtype updated if it changed.

Every file of the checkpoint folder is copied (tokenizer, generation config, chat template,
sentence-transformers modules, README, ...) except weights: safetensors (rewritten by export),
and other weight formats (pickle, ONNX, TF, Flax, GGUF), which would not be gauge-fixed and would
disagree with the exported safetensors; those are listed as skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ..errors import IdinspectError
from ..sources.file_names import CONFIG_FILE, WEIGHT_SUFFIXES
from ..sources.regular_file import read_regular

SKIPPED_DIRS = (".git", ".cache", ".huggingface")
_DTYPE_FIELD = re.compile(r'("(?:torch_)?dtype"\s*:\s*)(?:"[^"]*"|null)')


def is_weight_file(name: str) -> bool:
    """Weights in any format, and the index files that name them."""
    base = name[: -len(".index.json")] if name.endswith(".index.json") else name
    return base.endswith(WEIGHT_SUFFIXES)


def plan_copies(source: Path) -> tuple[list[str], list[str]]:
    """(files to copy, files skipped) relative to ``source``, sorted; config.json is handled apart."""
    copies, skipped = [], []
    for root, dirs, files in os.walk(source):
        rel_root = Path(root).relative_to(source)
        for d in sorted(dirs):
            if d in SKIPPED_DIRS or Path(root, d).is_symlink():
                skipped.append(str(rel_root / d) + "/")
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not Path(root, d).is_symlink())
        for f in sorted(files):
            rel = str(rel_root / f) if str(rel_root) != "." else f
            if rel == CONFIG_FILE:
                continue
            (skipped if is_weight_file(f) else copies).append(rel)
    return sorted(copies), sorted(skipped)


def copy_files(source: Path, target: Path, names: list[str]) -> None:
    """Copy each relative path from source to target as its content.

    Links are followed only where they stay inside the model: into the model folder itself or,
    for a hub-cache snapshot (``models--org--name/snapshots/<sha>``), into that repo's own
    ``blobs`` folder. Any other link, and anything that is not a regular file (a device such as
    ``/dev/zero``, a FIFO, a socket), is refused by name, like rsync without ``--copy-unsafe-links``.
    """
    allowed = _link_roots(source)
    for rel in names:
        src = source / rel
        _refuse_unsafe(src, rel, allowed)
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(src, dst)
        except OSError as exc:
            raise IdinspectError(f"{src}: cannot copy ({exc.strerror or exc})") from None


def _link_roots(source: Path) -> list[Path]:
    """Where links of a model folder may point: the folder, and a hub snapshot's own blobs."""
    root = source.resolve()
    roots = [root]
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        roots.append(root.parent.parent / "blobs")
    return roots


def _refuse_unsafe(src: Path, rel: str, allowed: list[Path]) -> None:
    import stat

    if src.is_symlink():
        try:
            real = src.resolve(strict=True)
        except (OSError, RuntimeError):
            raise IdinspectError(f"{src}: a broken link or a link loop; export does not copy it: fix or remove "
                                 "the link") from None
        if not any(real == r or real.is_relative_to(r) for r in allowed):
            raise IdinspectError(f"{src}: a link to {real}, outside the model folder; export never follows links "
                                 f"out of the model: replace {rel} by a copy of the file, or remove it")
    try:
        mode = os.stat(src).st_mode
    except OSError as exc:
        raise IdinspectError(f"{src}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise IdinspectError(f"{src}: {kind}, not a file; export copies only regular files: remove {rel} "
                             "from the model folder")


def config_text(source: Path, new_dtype: str | None) -> str:
    """config.json's text: unchanged when ``new_dtype`` is None, else every dtype/torch_dtype set to it.

    Only the dtype values change (text substitution keeps every other byte); a config without
    such a field gets a top-level ``"dtype"``.
    """
    path = source / CONFIG_FILE
    try:
        text = read_regular(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdinspectError(f"{path}: cannot read ({exc})") from None
    if new_dtype is None:
        return text
    changed, n = _DTYPE_FIELD.subn(lambda m: m.group(1) + json.dumps(new_dtype), text)
    if n == 0:
        data = json.loads(text)
        data["dtype"] = new_dtype
        changed = json.dumps(data, indent=2, sort_keys=True) + "\n"
    json.loads(changed)  # still valid JSON
    return changed


def index_text(index_path: Path, total_size: int) -> str:
    """The input index with ``metadata.total_size`` set; weight_map and key order kept."""
    data = json.loads(read_regular(index_path).decode("utf-8"))
    meta = data.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    data["metadata"] = {**meta, "total_size": total_size}
    if "metadata" in data and list(data)[0] != "metadata":
        data = {"metadata": data.pop("metadata"), **data}
    return json.dumps(data, indent=2) + "\n"

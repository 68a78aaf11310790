"""What a report records about the files it read: name, size and a digest of what was parsed.

For a local checkpoint: ``config.json`` and the index (sha256 of the whole, small, file) and each
safetensors shard (its size and the sha256 of its header: the 8-byte length and the JSON header,
which names, shapes and places every tensor). Digesting only headers keeps this free at any model
size while still pinning the layout; the tensors' bytes are not hashed. For a hub checkpoint read in
part, each shard's size and the hub's own sha256 of the whole file (its LFS ETag). Nothing else (a
GGUF file, a model in memory) is described.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .file_names import CONFIG_FILE, INDEX_FILE
from .safetensors_format import header_length


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _header_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        first8 = f.read(8)
        return hashlib.sha256(first8 + f.read(header_length(first8))).hexdigest()


def checkpoint_files(model) -> list[dict] | None:
    """``[{"name", "bytes", "sha256" | "header_sha256" | "hub_sha256"}]`` in reading order, or None."""
    from .checkpoint import SafetensorsCheckpoint
    from .remote import RemoteCheckpoint

    reader = model.reader
    if isinstance(reader, SafetensorsCheckpoint):
        folder = reader.directory
        out = []
        for name in (CONFIG_FILE, INDEX_FILE):
            path = folder / name
            if path.is_file():
                out.append({"name": name, "bytes": path.stat().st_size, "sha256": _sha256_file(path)})
        for name in reader.shard_files:
            path = folder / name
            out.append({"name": name, "bytes": path.stat().st_size, "header_sha256": _header_sha256(path)})
        return out
    if isinstance(reader, RemoteCheckpoint):
        out = []
        for name in reader.shard_files:
            remote = reader.files.get(name)
            entry: dict = {"name": name, "bytes": getattr(remote, "size", None)}
            etag = str(getattr(remote, "etag", "") or "").strip('"').removeprefix("W/").strip('"')
            if len(etag) == 64 and all(c in "0123456789abcdef" for c in etag):
                entry["hub_sha256"] = etag
            out.append(entry)
        return out
    return None


__all__ = ["checkpoint_files"]

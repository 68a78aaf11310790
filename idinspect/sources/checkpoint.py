"""Lazy tensor access to a checkpoint: safetensors files on disk, or a model's state dict.

Both readers expose the same small interface (``keys``, ``shape``, ``dtype``, ``get``,
``file_of``), so adapters never know where tensors come from. Pickle files are never opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import IdinspectError
from . import pread
from .file_names import INDEX_FILE, SINGLE_FILE
from .local_source import require_safetensors
from .mapped import map_tensor
from .safetensors_format import DTYPES_BY_CODE, tensor_spans

#: Bytes of read buffers a checkpoint keeps for reuse (:class:`.pread.BufferPool`): the tensors of
#: the layers in flight (see :data:`idinspect.numerics.parallel.IN_FLIGHT_BYTES`).
READ_POOL_BYTES = 2**30


class TensorReader:
    """Interface: named tensors read one at a time."""

    def keys(self) -> list[str]:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def dtype(self, name: str) -> torch.dtype:
        raise NotImplementedError

    def get(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def file_of(self, name: str) -> str | None:
        """The file (relative to the checkpoint directory) holding ``name``; None in memory."""
        return None

    def viewed(self, name: str) -> torch.Tensor:
        """``name`` for one read-only pass (a comparison): where the reader can, a view of the stored
        bytes in place (:mod:`.mapped`), else :meth:`get`. Never write to it."""
        return self.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._key_set()

    def _key_set(self) -> set[str]:
        if not hasattr(self, "_keys_cache"):
            self._keys_cache = set(self.keys())
        return self._keys_cache

    def close(self) -> None:
        pass


class SafetensorsCheckpoint(TensorReader):
    """``model.safetensors`` or a sharded ``model.safetensors.index.json`` in ``directory``.

    Shard headers are read (and validated against the index) on open; tensor data is read lazily,
    one tensor at a time, with ``safetensors.safe_open(..., backend="pread")``: each tensor is read
    with plain file reads into memory it owns and frees. (The default mmap backend's tensors view
    the shard's mapping, and every page read stays in this process's resident set while the shard
    is open: +21 MB per Llama-1B layer, the whole model on export.)
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        index = self.directory / INDEX_FILE
        single = self.directory / SINGLE_FILE
        self.index_path: Path | None = None
        self.index_metadata: dict = {}
        require_safetensors(self.directory)   # refuses pickle-only folders by name
        if single.is_file():
            files = [SINGLE_FILE]
            weight_map = None
        else:   # require_safetensors let the index through (a FIFO or device one: read_json refuses it by name)
            self.index_path = index
            weight_map, self.index_metadata = _read_index(index)
            files = sorted(set(weight_map.values()))
        self._handles = {}
        self._fds: dict[str, int] = {}
        self._pool = pread.BufferPool(READ_POOL_BYTES)
        self._span_cache: dict[str, dict[str, tuple[int, int]]] = {}
        for fname in files:
            path = self.directory / fname
            if not path.is_file():
                raise IdinspectError(f"{index}: names shard {fname}, which does not exist; re-download or re-save the checkpoint")
            self._handles[fname] = _open_shard(path)
        self._where = shard_of_each_tensor({f: h.keys() for f, h in self._handles.items()},
                                           lambda fname: str(self.directory / fname), fix="re-save it")
        if weight_map is not None:
            check_weight_map(self._where, weight_map, str(index), fix="re-download or re-save it")
        self.shard_files = files

    def keys(self) -> list[str]:
        return sorted(self._where)

    def _slice(self, name: str):
        try:
            return self._handles[self._where[name]].get_slice(name)
        except KeyError:
            raise IdinspectError(f"{self.directory}: no tensor named {name}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._slice(name).get_shape())

    def dtype(self, name: str) -> torch.dtype:
        code = self._slice(name).get_dtype()
        if code not in DTYPES_BY_CODE:
            raise IdinspectError(f"{self.directory / self._where[name]}: tensor {name} has dtype {code}, which "
                                 f"idinspect cannot read (readable: {', '.join(DTYPES_BY_CODE)})")
        return DTYPES_BY_CODE[code]

    def get(self, name: str) -> torch.Tensor:
        """Read ``name`` into memory it owns (see the class docstring): a buffer of the reader's pool
        that nothing uses any more, or fresh memory, with the GIL released during the read where the
        host allows (:mod:`.pread`)."""
        dtype = self.dtype(name)  # a dtype torch cannot hold is a one-line error, not safetensors' own
        try:
            fname = self._where[name]
            if pread.NATIVE:
                start, end = self._spans(fname)[name]
                return pread.read_tensor(self._fd(fname), start, end, dtype, self.shape(name), self._pool)
            return self._handles[fname].get_tensor(name)
        except KeyError:
            raise IdinspectError(f"{self.directory}: no tensor named {name}") from None
        except (SafetensorError, OSError) as exc:
            raise IdinspectError(f"{self.directory / self._where[name]}: cannot read tensor {name} ({exc}); "
                                 "re-download the file") from None

    def viewed(self, name: str) -> torch.Tensor:
        """``name`` as a read-only view of the shard's mapped pages (:func:`.mapped.map_tensor`), for one
        comparison; :meth:`get` where the host's byte order is not the file's."""
        if not pread.NATIVE:
            return self.get(name)
        dtype = self.dtype(name)
        try:
            fname = self._where[name]
            start, end = self._spans(fname)[name]
            return map_tensor(self._fd(fname), start, end, dtype, self.shape(name))
        except KeyError:
            raise IdinspectError(f"{self.directory}: no tensor named {name}") from None
        except (ValueError, OSError) as exc:
            raise IdinspectError(f"{self.directory / self._where[name]}: cannot read tensor {name} ({exc}); "
                                 "re-download the file") from None

    def _spans(self, fname: str) -> dict[str, tuple[int, int]]:
        if fname not in self._span_cache:
            self._span_cache[fname] = tensor_spans(self.directory / fname)
        return self._span_cache[fname]

    def _fd(self, fname: str) -> int:
        if fname not in self._fds:
            self._fds[fname] = os.open(self.directory / fname, os.O_RDONLY)
        return self._fds[fname]

    def file_of(self, name: str) -> str | None:
        return self._where.get(name)

    def metadata(self, fname: str) -> dict[str, str]:
        return dict(self._handles[fname].metadata() or {})

    def keys_in(self, fname: str) -> list[str]:
        """Tensor names of one shard in file order."""
        handle = self._handles[fname]
        return list(handle.offset_keys()) if hasattr(handle, "offset_keys") else list(handle.keys())

    def close(self) -> None:
        self._handles.clear()
        self._pool.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class StateDictReader(TensorReader):
    """Tensors of a model already in memory (nothing is written to disk).

    Tied tensors (``lm_head.weight`` aliasing the embeddings) are kept once, under their first name
    in state-dict order, as ``save_pretrained`` stores them; so keys and parameter counts match the
    model's own safetensors checkpoint.
    """

    def __init__(self, state: Mapping[str, torch.Tensor]):
        self._state: dict[str, torch.Tensor] = {}
        seen: set[tuple] = set()
        for name, tensor in state.items():
            t = tensor.detach()
            ident = _alias_key(t)
            if ident is not None and ident in seen:
                continue
            if ident is not None:
                seen.add(ident)
            self._state[name] = t

    def keys(self) -> list[str]:
        return sorted(self._state)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._tensor(name).shape)

    def dtype(self, name: str) -> torch.dtype:
        return self._tensor(name).dtype

    def get(self, name: str) -> torch.Tensor:
        t = self._tensor(name)
        if t.device.type == "meta":
            raise IdinspectError(f"model tensor {name} is on the meta device (not materialised or offloaded); "
                                 "load the model with real weights, or pass its checkpoint directory")
        return t.to("cpu")

    def _tensor(self, name: str) -> torch.Tensor:
        try:
            return self._state[name]
        except KeyError:
            raise IdinspectError(f"model state dict has no tensor named {name}") from None


def _alias_key(t: torch.Tensor) -> tuple | None:
    """Identity of the memory a tensor views (None where it has no storage, e.g. meta)."""
    if t.device.type == "meta":
        return None
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return (t.device.type, ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


class ViewReader(TensorReader):
    """Another reader seen through a view: the same names, shapes, dtypes and files; a subclass changes
    what ``get`` returns (:class:`ShapeOnlyReader`; export --whole-model's transformed tensors)."""

    def __init__(self, reader: TensorReader):
        self._reader = reader

    def keys(self) -> list[str]:
        return self._reader.keys()

    def __contains__(self, name: str) -> bool:
        return name in self._reader

    def shape(self, name: str) -> tuple[int, ...]:
        return self._reader.shape(name)

    def dtype(self, name: str) -> torch.dtype:
        return self._reader.dtype(name)

    def get(self, name: str) -> torch.Tensor:
        return self._reader.get(name)

    def file_of(self, name: str) -> str | None:
        return self._reader.file_of(name)


class ShapeOnlyReader(ViewReader):
    """Headers only: ``get`` returns an empty ``meta`` tensor of the stored shape and dtype.

    Running an adapter over it checks every name and shape the config implies without reading data.
    """

    def get(self, name: str) -> torch.Tensor:
        return torch.empty(self._reader.shape(name), dtype=self._reader.dtype(name), device="meta")


def shard_of_each_tensor(keys_by_shard: Mapping[str, Iterable[str]], where: Callable[[str], str],
                         fix: str = "") -> dict[str, str]:
    """Tensor name -> the shard storing it; a tensor stored twice is an error naming ``where(shard)``."""
    shard_of: dict[str, str] = {}
    for fname, keys in keys_by_shard.items():
        for key in keys:
            if key in shard_of:
                raise IdinspectError(f"{where(fname)}: tensor {key} is also stored in {shard_of[key]}; "
                                     f"a checkpoint must store each tensor once{': ' + fix if fix else ''}")
            shard_of[key] = fname
    return shard_of


def check_weight_map(shard_of: Mapping[str, str], weight_map: Mapping[str, str], index: str, fix: str = "") -> None:
    """Every tensor the index names is in the shard it names (``index``: how to call the index file)."""
    for key, fname in weight_map.items():
        if shard_of.get(key) != fname:
            raise IdinspectError(f"{index}: tensor {key} is indexed in {fname} but that shard does not contain it; "
                                 f"the checkpoint is incomplete or the index is stale{': ' + fix if fix else ''}")


def _read_index(path: Path) -> tuple[dict[str, str], dict]:
    from .validate import read_json

    data = read_json(path, fix="re-download or re-save the checkpoint")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise IdinspectError(f"{path}: has no 'weight_map' of tensor name -> shard file; re-save the checkpoint")
    for fname in weight_map.values():
        if "/" in fname or "\\" in fname or fname.startswith("."):
            raise IdinspectError(f"{path}: shard name {fname!r} points outside the checkpoint directory")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise IdinspectError(f"{path}: metadata is {type(metadata).__name__}, not a JSON object "
                             "(such as {\"total_size\": 123}); re-save the checkpoint or fix the index")
    return weight_map, dict(metadata or {})


def _open_shard(path: Path):
    try:
        return safe_open(str(path), framework="pt", backend="pread")
    except (SafetensorError, OSError) as exc:
        if _is_lfs_pointer(path):
            raise IdinspectError(f"{path}: a Git LFS pointer, not the weights; run 'git lfs pull' in the "
                                 "clone (or download the checkpoint with huggingface_hub)") from None
        raise IdinspectError(f"{path}: not a readable safetensors file ({exc}); the download may be "
                             "truncated: re-download it") from None


def _is_lfs_pointer(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(40).startswith(b"version https://git-lfs.github.com/spec/")
    except OSError:
        return False

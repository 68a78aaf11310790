"""The refusals of a local MODEL argument that need no torch: answered before anything heavy loads.

A missing path, a file that is not a checkpoint, a folder with no safetensors (or only pickles), a
GGUF file given to export: each is known from the file system alone, so the command line says so
in milliseconds instead of after importing torch and transformers (seconds). :func:`load` asks the
same questions through the same functions, so the library and the CLI give the same one-line answers.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import IdinspectError
from .file_names import CONFIG_FILE, INDEX_FILE, PICKLE_SUFFIXES, SINGLE_FILE
from .hub_ids import looks_like_path
from .validate import os_reason

def split_gguf_source(text: str) -> tuple[str, str] | None:
    """``org/name[@rev]:path/file.gguf`` -> (``org/name[@rev]``, ``path/file.gguf``); None otherwise."""
    head, sep, tail = text.partition(":")
    if sep and tail.lower().endswith(".gguf") and "/" in head and not head.startswith((".", "/", "~")):
        return head, tail
    return None


def local_path(text: str) -> Path | None:
    """The path a MODEL argument names when it is read locally (it exists, or looks like a path and
    is not a hub GGUF ``org/name:file.gguf``); None for a hub id or ``pkg:``. Raises when it names
    a local path that cannot be opened (absent, a dangling link, no permission)."""
    if text.startswith("pkg:"):
        return None
    path = Path(text).expanduser()
    if not path.exists() and not path.is_symlink() and split_gguf_source(text) is not None:
        return None
    if not (looks_like_path(text) or path.is_symlink()):
        return None
    try:
        path.stat()
    except OSError as exc:  # absent, a dangling link, a link loop, no permission on a parent
        raise IdinspectError(f"{text}: {os_reason(exc)}") from None
    return path


def is_gguf_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".gguf"


def require_directory(path: Path) -> None:
    """Raise unless ``path`` is a folder (a checkpoint is a folder, or one ``.gguf`` file)."""
    if not path.is_dir():
        hint = f"; pass its folder {path.parent}" if path.name in (CONFIG_FILE, SINGLE_FILE, INDEX_FILE) else ""
        raise IdinspectError(f"{path}: expected a checkpoint directory (config.json + model.safetensors), got a file{hint}")


def refuse_pickle(directory: Path) -> None:
    """Raise if ``directory`` holds pickle weights (``.bin``, ``.pt``, ...); they are never opened."""
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        shown = ", ".join(pickles[:3]) + (f", ... ({len(pickles) - 3} more)" if len(pickles) > 3 else "")
        raise IdinspectError(
            f"{directory}: only pickle weights ({shown}) and no safetensors; idinspect never unpickles "
            "(loading a pickle can run arbitrary code). Convert once, in a trusted environment: "
            "python -c \"from transformers import AutoModel; "
            f"AutoModel.from_pretrained('{directory}').save_pretrained('{directory}-safetensors')\" "
            "(use the model's own class, e.g. AutoModelForCausalLM, to keep its head), then inspect the new folder"
        )


def require_safetensors(directory: Path) -> None:
    """Raise unless ``directory`` holds ``model.safetensors`` or its index, naming what it holds instead."""
    index = directory / INDEX_FILE
    if (directory / SINGLE_FILE).is_file() or index.is_file() or (index.exists() and not index.is_dir()):
        return   # a FIFO or device index goes on to read_json, which refuses it by name
    others = sorted(p.name for p in directory.glob("*.safetensors"))
    if others:
        raise IdinspectError(
            f"{directory}: safetensors files {others} but neither {SINGLE_FILE} nor "
            f"{INDEX_FILE}; rename a single file to {SINGLE_FILE} or add the index that save_pretrained writes")
    refuse_pickle(directory)
    raise IdinspectError(f"{directory}: no {SINGLE_FILE} or {INDEX_FILE}; pass a checkpoint directory "
                         "written by save_pretrained (transformers writes safetensors by default)")


def gguf_export_refusal(path) -> IdinspectError:
    return IdinspectError(f"{path}: export writes Hugging Face safetensors checkpoints only and refuses a GGUF input "
                          "(its tensors may be quantised, and a gauge-fixed GGUF would need llama.cpp's own "
                          "writer); export the original Hugging Face checkpoint instead")


def check_local_source(text: str, *, export: bool = False) -> None:
    """Every refusal of the MODEL argument ``text`` that the file system alone decides (see the module
    docstring); ``export``: a GGUF file is refused too. Hub ids and ``pkg:`` pass untouched."""
    path = local_path(text)
    if path is None:
        return
    if is_gguf_file(path):
        if export:
            raise gguf_export_refusal(path)
        return
    require_directory(path)
    require_safetensors(path)


__all__ = ["check_local_source", "gguf_export_refusal", "local_path", "refuse_pickle", "require_directory",
           "require_safetensors", "split_gguf_source"]

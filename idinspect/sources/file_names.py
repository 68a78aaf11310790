"""The file names of a Hugging Face checkpoint folder, defined once for every reader and writer."""

from __future__ import annotations

CONFIG_FILE = "config.json"
#: An unsharded checkpoint's weights, as ``save_pretrained`` names them.
SINGLE_FILE = "model.safetensors"
#: A sharded checkpoint's index (``weight_map``: tensor name -> shard file).
INDEX_FILE = "model.safetensors.index.json"
#: The shards ``save_pretrained`` writes beside the index.
SHARD_PATTERN = "model-*-of-*.safetensors"
SAFETENSORS_SUFFIX = ".safetensors"
#: Pickle weights: never opened (loading a pickle can run arbitrary code).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: Weights in any format idinspect does not rewrite (TF, Flax, ONNX, GGUF, ...), plus the above.
WEIGHT_SUFFIXES = (SAFETENSORS_SUFFIX, *PICKLE_SUFFIXES, ".h5", ".msgpack", ".onnx", ".onnx_data", ".gguf",
                   ".tflite", ".ot", ".npz", ".pb")

__all__ = ["CONFIG_FILE", "INDEX_FILE", "PICKLE_SUFFIXES", "SAFETENSORS_SUFFIX", "SHARD_PATTERN", "SINGLE_FILE",
           "WEIGHT_SUFFIXES"]

"""Checkpoint files that tell when they are damaged: each tensor saved with a checksum of its bytes, checked
when the file is read, and a file that cannot be read named in the error.

A file written before checksums were saved loads unchecked.
"""

import zlib
from typing import Any, Dict, Iterator, Mapping, Tuple, Union

import torch

from marlparts.utils.files import save_atomically

#: the entry of a checkpoint that holds the checksums of its tensors
CHECKSUMS = "checksums"


class CorruptCheckpointError(ValueError):
    """A checkpoint file that is not whole: truncated, overwritten with something else, or with a tensor
    whose bytes changed after it was written.
    """


def _tensors(value: Any, name: str = "") -> Iterator[Tuple[str, torch.Tensor]]:
    """Every tensor in nested dicts, lists and tuples, with its place written as in Python
    (``modules['policy[agent_0]']['net.0.weight']``).
    """
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _tensors(item, f"{name}[{key!r}]" if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}[{index}]")


def tensor_checksum(tensor: torch.Tensor) -> int:
    """The CRC-32 of ``tensor``'s bytes (its values in memory order, on the CPU)."""
    flat = tensor.detach().reshape(-1).cpu().contiguous()
    return zlib.crc32(flat.view(torch.uint8).numpy())


def checksums(state: Mapping[str, Any]) -> Dict[str, int]:
    """``{place: checksum}`` of every tensor of ``state``."""
    return {name: tensor_checksum(tensor) for name, tensor in _tensors(state)}


def save_checkpoint_file(state: Mapping[str, Any], path: str) -> None:
    """Write ``state`` (a dict) to ``path`` atomically, with the checksum of each of its tensors."""
    save_atomically({**state, CHECKSUMS: checksums(state)}, path, what="checkpoint")


def load_checkpoint_file(path: str, map_location: Union[str, torch.device, None] = "cpu") -> Dict[str, Any]:
    """Read a file written by :func:`save_checkpoint_file` (tensors and plain data only: no code runs) and
    check every tensor against its checksum.

    Raises:
        CorruptCheckpointError: naming ``path`` (and the tensor whose bytes changed), where the file is
            truncated, is no checkpoint, or holds a tensor that does not match its checksum.
        FileNotFoundError: where there is no file at ``path``.
    """
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as error:
        raise CorruptCheckpointError(f"{path} cannot be read as a checkpoint (truncated, or not a checkpoint): "
                                     f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") \
            from error
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{path} holds a {type(state).__name__}, not a checkpoint")
    expected = state.pop(CHECKSUMS, None)
    if expected is None:
        return state  # written before checksums were saved
    found = checksums(state)
    for name in sorted(set(expected) | set(found)):
        if name not in found or name not in expected:
            where = "missing from the file" if name not in found else "without a checksum"
            raise CorruptCheckpointError(f"{path} is damaged: the tensor {name} is {where}")
        if found[name] != expected[name]:
            raise CorruptCheckpointError(f"{path} is damaged: the bytes of the tensor {name} changed after it was "
                                         "written (checksum mismatch)")
    return state

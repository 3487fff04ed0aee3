"""Preallocated storage of named tensors indexed by (step, env copy)."""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import gymnasium
import torch

from marlparts.utils.checkpoint_files import load_checkpoint_file, save_checkpoint_file
from marlparts.utils.devices import same_device
from marlparts.utils.spaces import flat_size

Size = Union[int, Tuple[int, ...], gymnasium.Space]


class InexactSampleError(ValueError):
    """A sample that the compact storage dtype of its memory tensor cannot hold exactly (a fraction, a negative or
    a value over 255 for bytes). ``name`` is the tensor, ``env_copy`` the copy and ``entry`` the place in the
    sample of the first such value, ``value`` the value.
    """

    def __init__(self, message: str, *, name: str, env_copy: int, entry: Tuple[int, ...], value: float) -> None:
        super().__init__(message)
        self.name, self.env_copy, self.entry, self.value = name, env_copy, entry, value


class Memory:
    """Named tensors of shape ``(memory_size, num_envs, *size)``, written one step at a time.

    Samples are taken over the flattened ``(memory_size * num_envs)`` axis; everything behind
    it (for example an agent axis of a group of agents) stays together in a sample.

    Args:
        memory_size: number of steps kept; writing past it wraps around.
        num_envs: number of env copies written per step.
        device: where the tensors live.
    """

    def __init__(self, *, memory_size: int, num_envs: int = 1, device: Union[str, torch.device, None] = None) -> None:
        if memory_size < 1 or num_envs < 1:
            raise ValueError(f"memory_size and num_envs must be >= 1, got {memory_size} and {num_envs}")
        self.memory_size = int(memory_size)
        self.num_envs = int(num_envs)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._device_given = device is not None
        self.tensors: Dict[str, torch.Tensor] = {}
        self.read_dtypes: Dict[str, torch.dtype] = {}  # tensors held in a compact dtype: the dtype they are read as
        self.memory_index = 0
        self.filled = False

    def check_device(self, device: Union[str, torch.device], *, owner: str) -> None:
        """Raise ``ValueError`` (naming ``owner``) if this memory is bound to another device than ``device``."""
        device = torch.device(device)
        if self._device_given and not same_device(self.device, device):
            raise ValueError(f"{owner} is on {self.device} (made with device=, or used by an algorithm there) but "
                             f"the algorithm computes on {device}: make the memory with device={device} (or without "
                             f"device=, to follow its algorithm), and give each algorithm memories of its own")

    def use_device(self, device: Union[str, torch.device], *, owner: str) -> None:
        """Put this memory where the algorithm that owns it computes.

        A memory made without ``device=`` follows the algorithm (its tensors move there) and stays
        bound to that device; one bound to another device is an error (see :meth:`check_device`),
        since every batch it gives would be on the wrong device. ``owner`` names the memory in that error.
        """
        self.check_device(device, owner=owner)
        self.device = torch.device(device)
        self._device_given = True
        self.tensors = {name: tensor.to(self.device) for name, tensor in self.tensors.items()}

    @property
    def newest_step(self) -> int:
        """The row of the last step written (the last row after writing wrapped to row 0)."""
        return (self.memory_index - 1) % self.memory_size

    def __len__(self) -> int:
        """Number of stored samples (steps × env copies)."""
        return (self.memory_size if self.filled else self.memory_index) * self.num_envs

    def create_tensor(self, name: str, size: Size, dtype: torch.dtype = torch.float32, *,
                      storage_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Allocate tensor ``name`` of per-sample ``size`` (an int, a shape, or a space to flatten), read as ``dtype``.

        With ``storage_dtype`` (``torch.uint8`` for pixels) the tensor is held in that dtype, a quarter of
        float32's bytes, and every read (:meth:`get_tensor_by_name`, :meth:`sample_by_index`,
        :meth:`chunks_by_index`) converts what it returns to ``dtype``; the samples written must be exact
        in it (pixel values 0-255). Returns the storage.
        """
        if isinstance(size, gymnasium.Space):
            size = (flat_size(size),)
        shape = (size,) if isinstance(size, int) else tuple(size)
        stored = storage_dtype or dtype
        if name in self.tensors:
            existing = self.tensors[name]
            # a tensor loaded before it was created has no read dtype yet: this call gives it one
            read_as = self.read_dtypes.get(name, dtype if existing.dtype == stored else existing.dtype)
            if existing.shape[2:] != shape or existing.dtype != stored or read_as != dtype:
                raise ValueError(f"memory tensor {name!r} exists with size {tuple(existing.shape[2:])} "
                                 f"{existing.dtype} read as {read_as}, asked for {shape} {stored} read as {dtype}")
        else:
            self.tensors[name] = torch.zeros((self.memory_size, self.num_envs, *shape), dtype=stored,
                                             device=self.device)
        if stored != dtype:
            self.read_dtypes[name] = dtype
        return self.tensors[name]

    def _as_read(self, name: str, values: torch.Tensor) -> torch.Tensor:
        """``values`` of tensor ``name`` in the dtype it is read as."""
        dtype = self.read_dtypes.get(name)
        return values if dtype is None else values.to(dtype)

    def _exactly_as_stored(self, name: str, value: torch.Tensor, stored: torch.dtype) -> torch.Tensor:
        """``value`` in the compact ``stored`` dtype of tensor ``name``; :class:`InexactSampleError` if a value does not
        survive the conversion (bytes would truncate fractions and wrap negatives and values over 255).
        """
        if value.dtype == stored:
            return value
        compact = value.to(stored)
        exact = compact.to(value.dtype) == value
        if bool(exact.all()):
            return compact
        place = tuple(int(i) for i in torch.nonzero(~exact)[0])
        bad = float(value[place])
        raise InexactSampleError(
            f"memory tensor {name!r} is held as {stored} and read as {self.read_dtypes[name]}, and cannot hold "
            f"the value {bad} of env copy {place[0]} at {place[1:]} exactly: the samples of a compact tensor must "
            f"be values its dtype holds (whole numbers 0-255 for bytes)", name=name, env_copy=place[0],
            entry=place[1:], value=bad)

    def add_samples(self, **tensors: torch.Tensor) -> None:
        """Write one step: each tensor has shape ``(num_envs, *size)``. Unknown names, other shapes and values that a
        compact tensor cannot hold exactly (:class:`InexactSampleError`) are errors, and then nothing is written.
        """
        writes = []
        for name, value in tensors.items():
            target = self._get(name)
            if value.shape != target.shape[1:]:
                raise ValueError(f"memory tensor {name!r} takes samples of shape {tuple(target.shape[1:])}, "
                                 f"got {tuple(value.shape)}")
            if name in self.read_dtypes:
                value = self._exactly_as_stored(name, value, target.dtype)
            writes.append((target, value))
        for target, value in writes:
            target[self.memory_index].copy_(value)
        self.memory_index += 1
        if self.memory_index >= self.memory_size:
            self.memory_index = 0
            self.filled = True

    def get_tensor_by_name(self, name: str, keepdim: bool = True) -> torch.Tensor:
        """The whole tensor ``name``: ``(memory_size, num_envs, *size)``, or flattened if not ``keepdim``. It is the
        storage itself, except for a tensor held in a compact ``storage_dtype``: that one is returned converted,
        a copy that writes do not reach (use :meth:`set_tensor_by_name`).
        """
        tensor = self._as_read(name, self._get(name))
        return tensor if keepdim else tensor.flatten(0, 1)

    def set_tensor_by_name(self, name: str, value: torch.Tensor) -> None:
        """Overwrite the whole tensor ``name`` with ``value`` (same shape)."""
        target = self._get(name)
        if value.shape != target.shape:
            raise ValueError(f"memory tensor {name!r} has shape {tuple(target.shape)}, got {tuple(value.shape)}")
        target.copy_(value)

    def minibatch_indexes(self, mini_batches: int, generator: Optional[torch.Generator] = None) -> List[torch.Tensor]:
        """A fresh random permutation of the stored samples, split into ``mini_batches`` index tensors."""
        count = len(self)
        if mini_batches < 1 or mini_batches > count:
            raise ValueError(f"mini_batches must be between 1 and the {count} stored samples, got {mini_batches}")
        permutation = torch.randperm(count, generator=generator, device=self.device)
        return list(permutation.tensor_split(mini_batches))

    def sample_by_index(self, names: Sequence[str], indexes: torch.Tensor) -> List[torch.Tensor]:
        """The samples at flat ``indexes`` of each tensor in ``names``."""
        # index_select: the same rows as advanced indexing, several times faster on the CPU for a 1-d index
        return [self._as_read(name, torch.index_select(self._get(name).flatten(0, 1), 0, indexes)) for name in names]

    def indexes_ahead(self, indexes: torch.Tensor, steps: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The flat indexes of the same env copies' next steps: ``(len(indexes), steps)``, column ``k``
        ``k`` steps after ``indexes`` (column 0 is ``indexes``), wrapping around the storage; and whether
        each of them is stored (a step after the newest stored one is not, nor is anything after it).
        """
        step, copy = indexes // self.num_envs, indexes % self.num_envs
        newest = self.newest_step
        stored_ahead = (newest - step) % self.memory_size if self.filled else newest - step
        offsets = torch.arange(steps, device=indexes.device)
        ahead = ((step.unsqueeze(1) + offsets) % self.memory_size) * self.num_envs + copy.unsqueeze(1)
        return ahead, offsets <= stored_ahead.unsqueeze(1)

    def chunks_by_index(self, names: Sequence[str], indexes: torch.Tensor, length: int) -> List[torch.Tensor]:
        """Chunks of ``length`` consecutive steps: the steps are cut into ``memory_size / length`` chunks per
        env copy, numbered chunk by chunk and copy by copy; returns each tensor of ``names`` at the chunks
        ``indexes``, shaped ``(len(indexes), length, *size)``.
        """
        if self.memory_size % length:
            raise ValueError(f"memory_size {self.memory_size} is not a whole number of chunks of {length} steps")
        chunks = []
        for name in names:
            tensor = self._get(name)
            by_chunk = tensor.unflatten(0, (self.memory_size // length, length)).transpose(1, 2)  # (chunks, envs, L, ...)
            chunks.append(self._as_read(name, by_chunk.flatten(0, 1)[indexes]))
        return chunks

    def sample_all(self, names: Sequence[str], mini_batches: int = 1) -> List[List[torch.Tensor]]:
        """Every stored sample once, shuffled anew on each call, split into ``mini_batches`` batches."""
        return [self.sample_by_index(names, indexes) for indexes in self.minibatch_indexes(mini_batches)]

    def sample_indexes(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` flat indexes drawn uniformly, with replacement, from what is stored."""
        count = len(self)
        if count == 0:
            raise ValueError("cannot sample from an empty memory")
        return torch.randint(count, (batch_size,), device=self.device)

    def sample(self, names: Sequence[str], batch_size: int) -> List[torch.Tensor]:
        """``batch_size`` samples drawn uniformly, with replacement, from what is stored."""
        return self.sample_by_index(names, self.sample_indexes(batch_size))

    def reset(self) -> None:
        """Forget what is stored (tensors stay allocated)."""
        self.memory_index = 0
        self.filled = False

    def state_dict(self) -> dict:
        """Tensors and write position, for saving."""
        return {"tensors": dict(self.tensors), "memory_index": self.memory_index, "filled": self.filled}

    def check_state(self, state: dict, what: str = "memory") -> None:
        """Raise ``ValueError`` naming ``what`` and the tensor if ``state`` does not fit this memory
        (other ``memory_size`` or ``num_envs``, or a tensor of another size); changes nothing.
        """
        for name, tensor in state["tensors"].items():
            expected = (self.memory_size, self.num_envs) + (tuple(self.tensors[name].shape[2:]) if name in self.tensors
                                                            else tuple(tensor.shape[2:]))
            if tuple(tensor.shape) != expected:
                raise ValueError(f"the checkpoint does not fit {what}: tensor {name!r} has shape {tuple(tensor.shape)} "
                                 f"in the checkpoint but {expected} here")

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.check_state(state)
        # a tensor this memory holds keeps its storage dtype (a checkpoint of float observations loads into bytes)
        self.tensors = {name: tensor.to(self.device, self.tensors[name].dtype if name in self.tensors else tensor.dtype)
                        for name, tensor in state["tensors"].items()}
        self.memory_index = int(state["memory_index"])
        self.filled = bool(state["filled"])

    def save(self, path: str) -> None:
        """Write the memory to ``path`` atomically (temporary file, then rename), each tensor with its checksum."""
        save_checkpoint_file(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Read a memory written by :meth:`save` (tensors only: no code is run); a damaged file raises
        :class:`~marlparts.utils.checkpoint_files.CorruptCheckpointError` naming it.
        """
        self.load_state_dict(load_checkpoint_file(path, map_location=self.device))

    def _get(self, name: str) -> torch.Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"memory has no tensor {name!r}; it has {sorted(self.tensors)}") from None


"""Data-parallel training over ``torchrun`` ranks, on ``torch.distributed``.

Launch a script with ``torchrun --nproc_per_node=N script.py`` (add torchrun's own ``--nnodes``,
``--node_rank`` and ``--rdzv_endpoint`` options for several machines) and call
:func:`init_distributed` at its start. Then each rank steps its own env copies from its own seed
streams; the algorithms broadcast their parameters from rank 0 before training, average
gradients with one all-reduce per optimizer step over one flat buffer, combine the
preprocessors' and value normalisers' statistics across ranks, and only rank 0 writes logs,
checkpoints and reports. Without ``torchrun`` every function here is a no-op for one process.
The process group is destroyed, and freed, when the script ends.
"""

import atexit
import gc
import importlib
import os
import sys
import types
import warnings
import weakref
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True in a run of several ranks (the process group initialised, world size above 1)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world_size() -> Tuple[int, int]:
    """``(rank, world size)``: ``(0, 1)`` outside a distributed run."""
    if not is_distributed():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def is_main_process() -> bool:
    """True on rank 0 (and outside a distributed run): the process that writes logs and checkpoints."""
    return rank_and_world_size()[0] == 0


def init_distributed(backend: str = "auto", *, device: Union[str, torch.device, None] = None) -> Tuple[int, int]:
    """Join the process group that ``torchrun`` describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``...); nothing happens when the script was not started by ``torchrun``.

    Args:
        backend: ``"gloo"`` (CPU), ``"nccl"`` (CUDA) or ``"auto"``: nccl when the training runs on CUDA,
            else gloo. With nccl each rank uses the GPU of its ``LOCAL_RANK``.
        device: where the training runs (the examples' ``--device``); for ``"auto"`` without it,
            nccl is chosen wherever CUDA is available.

    Returns:
        ``(rank, world size)``.

    The process group is destroyed at the script's exit while the interpreter is still whole, and must
    then be freed: one that outlives it keeps its gloo worker threads into the interpreter's
    finalisation, where a worker that drops the last reference to a tensor of a finished collective
    must take the GIL, is ended by ``pthread_exit`` inside a ``noexcept`` destructor and aborts the
    finished run ("terminate called without an active exception"; pytorch/pytorch#190489, #179291).
    ``torch.distributed.nn`` binds ``group=group.WORLD`` defaults when it is imported, and the first
    optimizer imports it (with dynamo, the compiler that ``torch.optim`` disables on its methods)
    after the group exists, which kept the group alive: it is imported here first, so that its
    defaults bind ``None``. The exit handler warns, naming them, if other default arguments or
    module attributes still hold the group.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or is_distributed():
        return rank_and_world_size()
    if backend == "auto":
        on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
        backend = "nccl" if on_cuda else "gloo"
    if backend == "nccl":
        local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        if gpus == 0:
            raise RuntimeError("nccl needs CUDA devices and this process sees none: train on the CPU with "
                               "init_distributed('gloo') (or device='cpu')")
        if local_rank >= gpus:
            raise RuntimeError(f"the rank with LOCAL_RANK={local_rank} has no GPU of its own: this machine has {gpus} "
                               f"CUDA device(s) and nccl needs one per rank; start at most {gpus} process(es) per "
                               f"node (torchrun --nproc_per_node={gpus}) or use init_distributed('gloo')")
        torch.cuda.set_device(local_rank)
    importlib.import_module("torch.distributed.nn")  # binds its ``group=group.WORLD`` defaults to None: see above
    dist.init_process_group(backend=backend)
    world_group = dist.group.WORLD
    atexit.register(_destroy_process_group_at_exit, None if world_group is None else weakref.ref(world_group))
    return rank_and_world_size()


def _destroy_process_group_at_exit(world_group: Optional[Callable[[], Any]]) -> None:
    """Destroy the process group, where there still is one (the script may have destroyed it itself),
    and warn if ``world_group`` (a weak reference to it) shows that something still holds it: its
    threads then run into the interpreter's finalisation, where they can abort the process.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    group = None if world_group is None else world_group()
    if group is not None:
        holders = _what_holds(group)
        listed = ", ".join(holders[:3]) + (f" and {len(holders) - 3} more" if len(holders) > 3 else "")
        warnings.warn(f"the process group outlived destroy_process_group(): {listed} still hold(s) it, and its "
                      "threads, left running into the interpreter's shutdown, can abort this process (SIGABRT); "
                      "a default argument such as group=dist.group.WORLD binds the group when its module is "
                      "imported: import such modules before init_distributed()", RuntimeWarning, stacklevel=1)


def _what_holds(group: Any) -> List[str]:
    """The functions whose default arguments hold ``group`` and the module attributes bound to it."""
    holders = [f"the default arguments of {function.__module__}.{function.__qualname__}"
               for function in gc.get_objects() if type(function) is types.FunctionType
               and any(value is group for value in (*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()))]
    holders += [f"{name}.{attribute}" for name, module in list(sys.modules.items())
                for attribute, value in list(getattr(module, "__dict__", {}).items()) if value is group]
    return holders or ["objects that are neither default arguments nor module attributes"]


def local_device() -> torch.device:
    """``cuda:<LOCAL_RANK>`` in a distributed run on CUDA, else the default CUDA device or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([tensor.reshape(-1) for tensor in tensors])


def _unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    offset = 0
    for tensor in tensors:
        tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()


def broadcast_tensors(tensors: Sequence[torch.Tensor], source: int = 0) -> None:
    """Give every rank the values of ``tensors`` on rank ``source``, through one flat broadcast."""
    if not is_distributed() or not tensors:
        return
    with torch.no_grad():
        flat = _flat(tensors)
        dist.broadcast(flat, src=source)
        _unflatten_into(flat, tensors)


def average_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Replace each parameter's gradient by its mean over the ranks: one all-reduce of one flat buffer.

    Parameters without a gradient on this step count as zero gradients (every rank must pass the same
    parameters in the same order).
    """
    if not is_distributed():
        return
    parameters = list(parameters)
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    gradients = [parameter.grad for parameter in parameters]
    flat = _flat(gradients)
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    _unflatten_into(flat, gradients)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of ``tensor`` over the ranks (``tensor`` itself outside a distributed run)."""
    if not is_distributed():
        return tensor
    tensor = tensor.clone()
    dist.all_reduce(tensor)
    return tensor


def mean_over_ranks(value: float) -> float:
    """The mean of a number over the ranks (e.g. the KL that a learning-rate schedule follows)."""
    if not is_distributed():
        return float(value)
    device = local_device() if dist.get_backend() == "nccl" else torch.device("cpu")  # nccl reduces CUDA tensors only
    return float(all_reduce_sum(torch.tensor([float(value)], dtype=torch.float64, device=device))) / dist.get_world_size()


def all_gather_tensors(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` of every rank concatenated along the first dimension, in rank order (sizes may differ)."""
    if not is_distributed():
        return tensor
    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, tensor.cpu())
    return torch.cat(gathered).to(tensor.device)


def check_same_on_every_rank(description: Mapping[str, Any], what: str) -> None:
    """Raise ``ValueError`` on every rank, naming the first entry that differs, if ``description``
    (e.g. ``{"observation space of agent_0": ..., ...}``) is not rank 0's.
    """
    if not is_distributed():
        return
    descriptions: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(descriptions, dict(description))
    for rank, other in enumerate(descriptions):
        for key in list(descriptions[0]) + [key for key in other if key not in descriptions[0]]:
            mine, theirs = descriptions[0].get(key, "nothing"), other.get(key, "nothing")
            if mine != theirs:
                raise ValueError(f"the ranks do not agree on {what}: {key} is {mine} on rank 0 but {theirs} on rank {rank}")


def warn_once_per_run(message: str) -> None:
    """A warning shown by rank 0 only."""
    if is_main_process():
        warnings.warn(message, RuntimeWarning, stacklevel=3)

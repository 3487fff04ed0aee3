"""A rank that leaves while its last all-reduce is still in flight: the race at exit, made certain.

    torchrun --standalone --nproc_per_node=2 benchmarks/torchrun_exit_rank.py

Run by ``torchrun_exit.py --variant in-flight``. Each rank builds an optimizer, as every training
script does, meets the other at a barrier, then starts an all-reduce and drops its tensor and its
``Work``. Rank 1 joins the all-reduce one second late. Rank 0 leaves the script at once, and its
last exit handler (registered first, so it runs after all others) holds the GIL for two seconds
without running Python code, as a slow shutdown does. If the process group outlived the library's
exit handler, rank 0's gloo worker finishes the all-reduce meanwhile, drops the last reference to
the tensor, waits for the GIL to free its Python object, gets it only after the interpreter began
its finalisation, is ended by ``pthread_exit`` there, and the process aborts ("terminate called
without an active exception"). A process group freed by the exit handler has waited for the work
in flight (and joined its threads) while the interpreter was whole.
"""

import atexit
import ctypes

# Registered before any module (logging, torch...) registers its own, so that it runs last; the C
# function itself, not a Python function that calls it: no Python code runs after the sleep, so the
# interpreter hands the GIL to no other thread before its finalisation begins.
atexit.register(ctypes.PyDLL(None).usleep, 2_000_000)  # a PyDLL call keeps the GIL while it sleeps

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from marlparts.utils.distributed import init_distributed  # noqa: E402


def main() -> None:
    rank, _ = init_distributed()
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # what every training script builds
    dist.barrier()
    if rank == 1:
        time.sleep(1.0)
    tensor = torch.ones(3)
    work = dist.all_reduce(tensor, async_op=True)
    if rank == 1:
        work.wait()
    del work, tensor
    print(f"rank {rank} leaves the script", flush=True)


if __name__ == "__main__":
    main()

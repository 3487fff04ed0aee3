"""How the process's C allocator treats the memory of large freed tensors.

PyTorch takes a CPU tensor's memory from the C library's ``malloc``. glibc serves a block of more than
128 KiB with a fresh ``mmap`` and hands it back to the kernel when it is freed, and it gives back the
free top of its heap whenever that exceeds twice the largest block it has recently freed. A training
update frees and takes again blocks of the same sizes at every minibatch (activations, their gradients),
so with these defaults the kernel pages them in again, one zeroed page at a time: in the VMAS balance
example about 20,000 page faults per update, a tenth of the update's time. :func:`reuse_freed_memory`
keeps freed blocks in the process for the next allocations (the fix that PyTorch's CPU performance guide
reaches by loading jemalloc or tcmalloc, here without a preloaded library).
"""

import ctypes
import ctypes.util
import platform
import sys

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap, not from a mapping of their own (glibc's largest threshold on 64-bit).
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20
#: Free memory at the top of the heap is given back to the kernel only beyond this.
TRIM_THRESHOLD_BYTES = 2 ** 30


def reuse_freed_memory() -> bool:
    """Keep the memory of freed tensors of up to 32 MiB in the process, for the next ones, and return ``True``;
    return ``False`` (and change nothing) where the C library is not glibc.

    With glibc (Linux), blocks of up to :data:`MMAP_THRESHOLD_BYTES` are taken from the heap rather than mapped
    one by one, and up to :data:`TRIM_THRESHOLD_BYTES` of free heap is kept rather than given back. The
    process's resident memory then stays near its peak instead of falling between updates; no value changes.
    The setting holds for the whole process; :class:`~marlparts.trainers.SequentialTrainer` applies it unless
    its ``cfg["reuse_freed_memory"]`` is ``False``.
    """
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))

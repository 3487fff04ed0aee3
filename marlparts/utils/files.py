"""Files written so that a failed or interrupted write never leaves a half-written one: a temporary file
beside the target, then one rename. A write that fails says which file and why (a full disk by its folder),
leaves the previous file at the target as it was, and leaves no temporary file behind.
"""

import errno
import io
import json
import os
import secrets
from typing import Any, BinaryIO, Callable

#: errors of a write that found no room: the disk (or the user's quota) is full
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the file descriptor ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _DescriptorWriter(io.RawIOBase):
    """A binary file over a file descriptor, written without a buffer: each ``write`` reaches the file or fails."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        """Always: the file is opened for writing."""
        return True

    def write(self, data: Any) -> int:
        """Write all of ``data``."""
        write_all(self.fd, bytes(data))
        return len(data)


def _first_cause(error: BaseException) -> BaseException:
    """What made ``error``: an interrupt or an ``OSError`` in its chain of causes (libraries that write through a
    file object, such as ``torch.save``, raise errors of their own that name neither the file nor the cause),
    else ``error`` itself.
    """
    chain, current = [], error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    interrupt = next((e for e in chain if not isinstance(e, Exception)), None)
    return interrupt or next((e for e in chain if isinstance(e, OSError)), error)


def describe_write_error(error: OSError, path: str) -> str:
    """``error``'s reason, with the folder whose disk is full where the write found no room."""
    reason = error.strerror or str(error)
    if error.errno in NO_ROOM:
        reason += f" (the disk holding {os.path.dirname(os.path.abspath(path))} is full)"
    return reason


def _write_new_file(path: str, write: Callable[[BinaryIO], None], *, what: str, target: str) -> None:
    """Create ``path`` and call ``write(file)`` on it; a failed write raises ``OSError`` naming ``what`` and
    ``target``, with the cause that the writer met.
    """
    writer = _DescriptorWriter(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    try:
        write(writer)
        os.fsync(writer.fd)
    except BaseException as error:
        cause = _first_cause(error)
        if cause is error and not isinstance(error, OSError):
            raise
        if not isinstance(cause, OSError):
            raise cause from None  # an interrupt that landed in a write stays an interrupt
        raise OSError(cause.errno, f"could not write {what} {target}: {describe_write_error(cause, target)}") from error
    finally:
        os.close(writer.fd)


def write_atomically(path: str, write: Callable[[BinaryIO], None], *, what: str = "file") -> None:
    """Call ``write(file)`` on a new temporary file beside ``path`` and move it to ``path`` in one rename.

    A process killed while writing leaves the previous file at ``path`` untouched. A write that fails (or is
    interrupted) leaves no temporary file; one that fails raises ``OSError`` naming ``what``, ``path`` and
    the cause (the folder whose disk is full, where the write found no room).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # the name is fixed before the file exists: an interrupt at any point after its creation removes it below
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:
        _write_new_file(temporary, write, what=what, target=path)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def save_atomically(state: Any, path: str, *, what: str = "file") -> None:
    """``torch.save(state, path)`` through a temporary file and a rename (see :func:`write_atomically`)."""
    import torch  # here, not at the top: the benchmark runner writes its files through this module without PyTorch

    write_atomically(path, lambda file: torch.save(state, file), what=what)


def write_json_atomically(data: Any, path: str) -> None:
    """Write ``data`` as indented JSON to ``path`` through a temporary file and a rename."""
    write_atomically(path, lambda file: file.write(json.dumps(data, indent=2).encode()), what="report")


def append_json_line(data: Any, path: str) -> None:
    """Append ``data`` as one line of JSON to ``path`` (JSON Lines), in one write, flushed to disk: a crash
    leaves every earlier line whole.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = json.dumps(data) + "\n"
    with open(path, "a") as file:
        file.write(line)
        file.flush()
        os.fsync(file.fileno())

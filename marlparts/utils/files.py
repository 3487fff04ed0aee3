"""Files written so that a crash never leaves a half-written one: a temporary file, then one rename."""

import json
import os
import tempfile
from typing import Any, Callable

import torch


def write_atomically(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(temporary_path)`` and move the result to ``path`` in one rename.

    A process killed while writing leaves the previous file at ``path`` untouched.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def save_atomically(state: Any, path: str) -> None:
    """``torch.save(state, path)`` through a temporary file and a rename."""
    write_atomically(path, lambda temporary: torch.save(state, temporary))


def write_json_atomically(data: Any, path: str) -> None:
    """Write ``data`` as indented JSON to ``path`` through a temporary file and a rename."""
    def write(temporary: str) -> None:
        with open(temporary, "w") as file:
            json.dump(data, file, indent=2)

    write_atomically(path, write)


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

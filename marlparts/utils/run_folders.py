"""Experiment folders: which one is free for a new run, and what a run wrote after a given step (the files a
run resumed from an earlier checkpoint would overwrite).
"""

import os
import re
from typing import List

#: files named by the step at which a run wrote them, relative to its folder
_FILES_OF_A_STEP = (("checkpoints", re.compile(r"agent_(\d+)\.pt")), ("videos", re.compile(r"eval_(\d+)\.\w+")))


def folder_is_used(folder: str) -> bool:
    """Whether ``folder`` exists and holds anything (an empty folder made beforehand is not a run)."""
    return os.path.isdir(folder) and bool(os.listdir(folder))


def free_folder(folder: str) -> str:
    """``folder`` if no run uses it, else the first unused of ``folder_2``, ``folder_3``, ..."""
    folder = os.path.normpath(folder)
    number, candidate = 2, folder
    while folder_is_used(candidate) or (os.path.exists(candidate) and not os.path.isdir(candidate)):
        candidate, number = f"{folder}_{number}", number + 1
    return candidate


def files_written_after(folder: str, timestep: int) -> List[str]:
    """The files of ``folder`` named by a step later than ``timestep`` (``checkpoints/agent_<step>.pt``,
    ``videos/eval_<step>.<format>``), relative to ``folder``, in the order of their steps.
    """
    later = []
    for subfolder, pattern in _FILES_OF_A_STEP:
        directory = os.path.join(folder, subfolder)
        for name in os.listdir(directory) if os.path.isdir(directory) else ():
            match = pattern.fullmatch(name)
            if match and int(match.group(1)) > timestep:
                later.append((int(match.group(1)), f"{subfolder}/{name}"))
    return [name for _, name in sorted(later)]

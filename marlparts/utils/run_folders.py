"""Experiment folders: which one is free for a new run, what a run wrote after a given step (the files a
run resumed from an earlier checkpoint would overwrite), and the newest checkpoint a run cut short left.
"""

import glob
import os
import re
from typing import List, Optional

#: files named by the step at which a run wrote them, relative to its folder
_CHECKPOINT_OF_A_STEP = re.compile(r"agent_(\d+)\.pt")
_FILES_OF_A_STEP = (("checkpoints", _CHECKPOINT_OF_A_STEP), ("videos", re.compile(r"eval_(\d+)\.\w+")))


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


def newest_checkpoint(directory: str) -> Optional[str]:
    """The checkpoint of the latest step that a run wrote anywhere under ``directory``
    (``<experiment folder>/checkpoints/agent_<step>.pt``, at any depth), or None where there is none: where a run
    cut short (a crash, a stopped session) goes on from. Of two checkpoints of one step (an experiment folder and
    a branch of it), the one written last.
    """
    newest, newest_key = None, None
    for path in glob.glob(os.path.join(glob.escape(directory), "**", "checkpoints", "agent_*.pt"), recursive=True):
        match = _CHECKPOINT_OF_A_STEP.fullmatch(os.path.basename(path))
        if match is None:
            continue
        key = (int(match.group(1)), os.path.getmtime(path))
        if newest_key is None or key > newest_key:
            newest, newest_key = path, key
    return newest

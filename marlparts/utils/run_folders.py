"""Experiment folders: which one is free for a new run, what a run wrote after a given step (the files a
run resumed from an earlier checkpoint would overwrite), and the newest checkpoint a run cut short left.
"""

import glob
import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from marlparts.utils.files import write_json_atomically

#: the file in a run's own folder that records the settings it was started with (:func:`checkpoint_to_resume`)
RUN_SETTINGS_FILE = "run_settings.json"

#: files named by the step at which a run wrote them, relative to its folder
_CHECKPOINT_OF_A_STEP = re.compile(r"agent_(\d+)\.pt")
_FILES_OF_A_STEP = (("checkpoints", _CHECKPOINT_OF_A_STEP),
                    ("videos", re.compile(r"eval_(\d+)(?:_against_others)?\.\w+")))


def step_of_checkpoint(name: str) -> Optional[int]:
    """The step in a step checkpoint's file name (``agent_<step>.pt``, a path or a bare name); None for any other
    file (``best_agent.pt``, ``final_agent.pt``, a temporary file being written).
    """
    match = _CHECKPOINT_OF_A_STEP.fullmatch(os.path.basename(name))
    return None if match is None else int(match.group(1))


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
    """The checkpoint a run cut short (a crash, a stopped session) goes on from: of the step checkpoints under
    ``directory`` (``<experiment folder>/checkpoints/agent_<step>.pt``, at any depth), the latest step of the
    experiment folder written to last, so that of a folder and a branch of it (``<folder>_from_<step>``) the
    lineage that ran last wins, while within a folder the step decides (copies may not keep the files' times).
    Folders last written at the same time: the one with the later step, then the later path. None where there
    is none.
    """
    folders: Dict[str, List[Tuple[int, str]]] = {}
    for path in glob.glob(os.path.join(glob.escape(directory), "**", "checkpoints", "agent_*.pt"), recursive=True):
        step = step_of_checkpoint(path)
        if step is not None:
            folders.setdefault(os.path.dirname(path), []).append((step, path))
    if not folders:
        return None
    last_written = max(folders, key=lambda folder: (max(os.path.getmtime(path) for _, path in folders[folder]),
                                                    max(folders[folder])[0], folder))
    return max(folders[last_written])[1]


def checkpoint_to_resume(directory: str, settings: Mapping[str, Any]) -> Optional[str]:
    """Where the run of ``settings`` (the options that make it this run: task, seed, budget, ...) goes on from in
    ``directory``, the run's own folder: its :func:`newest_checkpoint`, or None for a fresh start.

    The first call records ``settings`` in ``directory/run_settings.json``; a later call checks them against
    that record, so that a run never goes on from another run's checkpoint (a run of other settings that
    left no checkpoint is replaced: this one starts afresh and is recorded).

    Raises:
        ValueError: ``directory`` holds checkpoints of a run of other settings (naming them), or of a run whose
            settings were not recorded: give each run a directory of its own.
    """
    wanted = json.loads(json.dumps(dict(settings)))
    path = os.path.join(directory, RUN_SETTINGS_FILE)
    checkpoint = newest_checkpoint(directory)
    try:
        with open(path) as file:
            recorded = json.load(file)
    except FileNotFoundError:
        recorded = None
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read the run settings {path}: {error}") from error
    if recorded is not None and not isinstance(recorded, dict):
        raise ValueError(f"the run settings {path} hold a {type(recorded).__name__}, not a JSON object")
    if checkpoint is None:  # nothing to go on from (any earlier run left no checkpoint): a fresh start, recorded
        write_json_atomically(wanted, path)
        return None
    if recorded is None:
        raise ValueError(f"{directory} holds checkpoints ({checkpoint}) of a run whose settings were not recorded: "
                         "to go on from one, load it by name; else give this run a directory of its own")
    differences = sorted(key for key in set(recorded) | set(wanted) if recorded.get(key) != wanted.get(key))
    if differences:
        shown = ", ".join(f"{key} {recorded.get(key)!r} there, {wanted.get(key)!r} here" for key in differences)
        raise ValueError(f"{directory} holds a run of other settings ({shown}): give each run a directory of its own")
    return checkpoint

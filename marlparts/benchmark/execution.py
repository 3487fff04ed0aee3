"""One run of a grid in a process of its own, and what it leaves: its learning curve, or why it failed."""

import glob
import importlib.metadata
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import marlparts
from marlparts.benchmark.grid import RunSpec

LOG_TAIL_LINES = 40

#: the signals that stop a run rather than show it failed: an interrupt (Ctrl-C reaches the whole process group),
#: a termination or a hang-up (a session that ends); not SIGKILL, which the kernel's out-of-memory killer sends
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@dataclass
class Outcome:
    """What a run left.

    Attributes:
        finished: the process exited with status 0 and wrote its learning curve.
        returncode: the process's exit status.
        evaluations: the points of the learning curve (``evaluations.jsonl``, one dict per evaluation).
        seconds: how long the process ran.
        error: why the run failed (None if it finished).
        log_tail: the log's last lines.
        log: the whole log, where the run's log was not written to a file of the driver's (Ray).
        provenance: which code ran (:func:`code_provenance`).
        signal_number: the signal that ended the run's process (None where it exited, or never started).
    """

    finished: bool
    returncode: int
    evaluations: List[Dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    error: Optional[str] = None
    log_tail: str = ""
    log: Optional[str] = None
    provenance: Dict[str, Any] = field(default_factory=dict)
    signal_number: Optional[int] = None

    @property
    def stopped(self) -> bool:
        """The run's process was stopped by a signal of :data:`STOP_SIGNALS` (not a failure of the run)."""
        return not self.finished and self.signal_number in STOP_SIGNALS


def _version(package: str) -> Optional[str]:
    """The installed version of ``package`` (None where it is not installed), without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(folder: Optional[str], *arguments: str) -> Optional[str]:
    """The output of ``git -C folder ...``, or None where ``folder`` is in no repository (or git is missing)."""
    if folder is None:
        return None
    try:
        done = subprocess.run(["git", "-C", folder, *arguments], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_provenance(run: RunSpec) -> Dict[str, Any]:
    """Which code a run ran: per source (the script's folder, the marlparts package) its git commit and whether
    its tracked files had changes, and the versions of marlparts, PyTorch and Python, and the host.
    """
    info: Dict[str, Any] = {"marlparts": marlparts.__version__, "torch": _version("torch"),
                            "python": platform.python_version(), "host": socket.gethostname()}
    sources = {"marlparts": os.path.dirname(os.path.abspath(marlparts.__file__))}
    if run.script is not None:
        sources["script"] = os.path.dirname(run.script)
    for name, folder in sources.items():
        commit = _git(folder, "rev-parse", "HEAD")
        if commit is not None:
            changes = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".")
            info[f"{name}_commit"] = commit
            info[f"{name}_changed"] = bool(changes)
    return info


def command_of(run: RunSpec, directory: str) -> List[str]:
    """The command line that starts ``run`` with its results under ``directory``."""
    fields = run.fields(directory)
    if run.script is not None:
        try:
            return [sys.executable, run.script] + [argument.format(**fields) for argument in run.arguments]
        except (KeyError, IndexError) as error:
            raise ValueError(f"the argument template {list(run.arguments)} of {run.algorithm} names {error}, which is "
                             f"none of {sorted(fields)}") from error
    return [sys.executable, "-m", "marlparts.benchmark.child", run.function, json.dumps(fields)]


def read_learning_curve(directory: str, expected: Optional[int] = None) -> List[Dict[str, Any]]:
    """The points of the one ``evaluations.jsonl`` under ``directory``, in order of their step count (an evaluation
    repeated at one step count, such as a final ``eval()`` after the last periodic one, counted once).

    Raises:
        ValueError: none, or several, were written there, naming the folder; or the curve has another number of
            points than ``expected``.
    """
    paths = sorted(glob.glob(os.path.join(directory, "**", "evaluations.jsonl"), recursive=True))
    if not paths:
        raise ValueError(f"no evaluations.jsonl was written under {directory}: the run must train with a "
                         "SequentialTrainer whose experiment folder lies there, evaluating with eval_interval")
    if len(paths) > 1:
        raise ValueError(f"several learning curves were written under {directory} ({paths}): a run of the grid trains "
                         "one algorithm")
    with open(paths[0]) as file:
        points = [json.loads(line) for line in file if line.strip()]
    last: Dict[int, Dict[str, Any]] = {}
    for point in points:  # a repeated evaluation at the same step (the final one after the last periodic): the last
        last[int(point["env_steps"])] = point
    if expected is not None and len(last) != expected:
        raise ValueError(f"the run evaluated at {len(last)} step counts ({sorted(last)}) where the grid asks for {expected} "
                         f"evaluations ({paths[0]}): learning curves of different runs would not line up")
    return [last[steps] for steps in sorted(last)]


def _tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as file:
            return "".join(file.readlines()[-lines:])
    except OSError:
        return ""


def execute(run: RunSpec, directory: str, log_path: str, *, keep_open: Sequence[int] = ()) -> Outcome:
    """Run ``run`` in a process of its own with its results under ``directory`` and its output in ``log_path``
    (appended to).

    The process gets one thread per library (``OMP_NUM_THREADS=1``...): runs in parallel share the cores. It
    inherits the file descriptors ``keep_open`` (the run's claim: a run whose driver died keeps its claim until
    it ends, so that no other driver starts it meanwhile).
    """
    os.makedirs(directory, exist_ok=True)
    command = command_of(run, directory)
    provenance = code_provenance(run)
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1",
                       PYTHONUNBUFFERED="1")
    began = time.perf_counter()
    with open(log_path, "a") as log:  # a resumed attempt's log goes on after the earlier start's
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   cwd=os.path.dirname(run.script) if run.script else None,
                                   pass_fds=tuple(keep_open) if os.name == "posix" else ())
        try:
            returncode = process.wait()
        except BaseException:  # the driver is stopped: so is the run, which stays unfinished
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
    seconds = time.perf_counter() - began
    if returncode != 0:
        signal_number = -returncode if returncode < 0 else None
        error = f"the process was ended by signal {signal_number}" if signal_number else \
            f"the process exited with status {returncode}"
        return Outcome(False, returncode, seconds=seconds, log_tail=_tail(log_path), error=error,
                       provenance=provenance, signal_number=signal_number)
    try:
        evaluations = read_learning_curve(directory, expected=run.evaluations)
    except (ValueError, OSError, json.JSONDecodeError, KeyError) as error:
        return Outcome(False, returncode, seconds=seconds, log_tail=_tail(log_path), error=str(error),
                       provenance=provenance)
    return Outcome(True, returncode, evaluations, seconds=seconds, log_tail=_tail(log_path), provenance=provenance)


def execute_elsewhere(run: RunSpec) -> Outcome:
    """:func:`execute` in a temporary folder of the machine it runs on, the whole log in the outcome: for a
    worker of a cluster (Ray), whose files the driver cannot read.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="marlparts-run-") as folder:
        log_path = os.path.join(folder, "log.txt")
        outcome = execute(run, os.path.join(folder, "work"), log_path)
        with open(log_path, errors="replace") as file:
            outcome.log = file.read()
    return outcome

"""Run a grid: every run not yet finished, each in a process of its own, on a local pool or on Ray.

The grid's folder holds one folder per run, ``runs/<environment>/<task>/<algorithm>/seed_<seed>/``:
``result.json`` once the run has finished (its learning curve; a finished run is never run again),
``failed.json`` where an attempt failed (which, why, and the end of its log), and one folder per
attempt, ``attempt_<n>/``, with the run's ``log.txt``, ``run.json`` (the run as the grid defined it)
and the experiment folder it trained in.

A run stopped half-way (the machine went down, the session ended, the driver was interrupted; a run
ended by SIGINT, SIGTERM or SIGHUP is stopped, not failed) starts again at the next :func:`run_grid`.
A run of a ``resumable`` cell goes on in the attempt folder that was cut short, from its last
checkpoint, where it wrote one and its ``run.json`` shows the grid still defines the run as it did
(on the local pool only: a Ray worker writes in a folder of its own). Any other run starts in a new
attempt folder, and nothing an earlier attempt wrote is touched. An attempt that failed is never
resumed.

While a run runs, its folder holds ``claim.json``, naming its host and driver and locked by the
driver and by the run's process: a second driver on the same grid folder passes over the runs the
first one holds, so several drivers share a grid without running a run twice. The lock goes with the
processes that held it; a run whose driver died holds it until it ends.
"""

import concurrent.futures
import glob
import json
import os
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from marlparts.benchmark.execution import Outcome, execute, execute_elsewhere
from marlparts.benchmark.grid import Grid, RunSpec
from marlparts.utils.files import write_json_atomically
from marlparts.utils.run_folders import newest_checkpoint

RESULT_FILE = "result.json"
FAILURE_FILE = "failed.json"
CLAIM_FILE = "claim.json"
SPEC_FILE = "run.json"  # in each attempt folder: the run as the grid defined it when the attempt started


@dataclass
class GridProgress:
    """Where a grid stands: runs ``done``, ``running``, ``left`` (not started) and ``failed`` (this call)."""

    done: int = 0
    running: int = 0
    left: int = 0
    failed: List[str] = field(default_factory=list)
    elsewhere: List[str] = field(default_factory=list)
    stopped: List[str] = field(default_factory=list)

    def line(self) -> str:
        """``done 3, running 2, left 10, failed 1`` (and ``stopped 1``, ``held by another driver 2`` where some
        are).
        """
        line = f"done {self.done}, running {self.running}, left {self.left}, failed {len(self.failed)}"
        line += f", stopped {len(self.stopped)}" if self.stopped else ""
        return line + (f", held by another driver {len(self.elsewhere)}" if self.elsewhere else "")


def run_folder(out: str, run: RunSpec) -> str:
    """The folder of ``run`` in the grid folder ``out``."""
    return os.path.join(out, "runs", run.key)


def is_finished(out: str, run: RunSpec) -> bool:
    """Whether ``run`` has finished (its ``result.json`` is there)."""
    return os.path.isfile(os.path.join(run_folder(out, run), RESULT_FILE))


_held_claims: Dict[str, int] = {}  # run folder -> the open, locked claim file of this process


def claim(folder: str) -> bool:
    """Take the run of ``folder`` for this process: an exclusive lock on its ``claim.json`` (which also names the
    host and process), held until :func:`release`; False where another process holds it. The operating system
    drops the lock of a process that ends, so a driver that was killed leaves no claim behind. Without
    ``fcntl`` (Windows) every claim succeeds: run one driver per grid folder there.
    """
    path = os.path.join(folder, CLAIM_FILE)
    handle = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(handle).st_ino != os.stat(path).st_ino:  # its holder released (and removed) it meanwhile
            raise BlockingIOError(f"{path} was replaced")
    except (BlockingIOError, FileNotFoundError):
        os.close(handle)
        return False
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(handle, 0)
    os.write(handle, json.dumps(holder).encode())
    _held_claims[folder] = handle
    return True


def held_claim(folder: str) -> Optional[int]:
    """The file descriptor of this process's locked claim on the run of ``folder`` (None where it holds none, or
    claims are not locked: Windows).
    """
    return _held_claims.get(folder) if fcntl is not None else None


def release(folder: str) -> None:
    """Give up this process's claim on the run of ``folder`` (its file removed, then its lock)."""
    handle = _held_claims.pop(folder, None)
    if handle is None:
        return
    try:
        os.remove(os.path.join(folder, CLAIM_FILE))
    except FileNotFoundError:
        pass
    os.close(handle)  # closing drops the lock


def next_attempt(folder: str) -> str:
    """A new attempt folder ``attempt_<n>`` in ``folder`` (n one above the highest there)."""
    numbers = [int(name.split("_", 1)[1]) for name in (os.listdir(folder) if os.path.isdir(folder) else [])
               if name.startswith("attempt_") and name.split("_", 1)[1].isdigit()]
    return os.path.join(folder, f"attempt_{max(numbers, default=0) + 1}")


def spec_record(run: RunSpec) -> Dict[str, Any]:
    """``run`` as JSON data (what an attempt's ``run.json`` holds)."""
    return json.loads(json.dumps(asdict(run)))


def same_run(record: Mapping[str, Any], run: RunSpec) -> bool:
    """Whether an attempt's ``run.json`` describes ``run``: every setting equal, the script by its file name (a
    grid driven from another checkout of the same scripts is the same grid).
    """
    def comparable(values: Mapping[str, Any]) -> Dict[str, Any]:
        script = values.get("script")
        return {**values, "script": os.path.basename(script) if script else script}
    return comparable(record) == comparable(spec_record(run))


def claimed_elsewhere(folder: str) -> bool:
    """Whether the claim on the run of ``folder`` names a live process of this host other than this one (read,
    not locked, so that asking never keeps a driver from a run). A run whose driver died while the run goes on
    reads as not claimed here.
    """
    try:
        with open(os.path.join(folder, CLAIM_FILE)) as file:
            holder = json.load(file)
        pid = int(holder["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if holder.get("host") != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def newest_attempt(folder: str) -> Optional[str]:
    """The newest ``attempt_<n>`` folder of the run folder ``folder`` (None before the first attempt)."""
    number = int(next_attempt(folder).rsplit("_", 1)[1]) - 1
    return os.path.join(folder, f"attempt_{number}") if number >= 1 else None


def failed_attempt(folder: str) -> Optional[str]:
    """The name of the attempt that the run folder's ``failed.json`` names (None where there is none).

    Raises:
        ValueError: ``failed.json`` cannot be read.
    """
    try:
        with open(os.path.join(folder, FAILURE_FILE)) as file:
            return json.load(file)["attempt"]
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"cannot read {os.path.join(folder, FAILURE_FILE)}: {error}") from error


def run_state(out: str, run: RunSpec) -> str:
    """Where ``run`` stands in the grid folder ``out``: ``"finished"``, ``"running"`` (a live driver of this host
    holds it), ``"failed"`` (its newest attempt failed), ``"cut short"`` (its newest attempt ended with no
    outcome: stopped) or ``"not started"``.
    """
    folder = run_folder(out, run)
    if is_finished(out, run):
        return "finished"
    if claimed_elsewhere(folder):
        return "running"
    attempt = newest_attempt(folder)
    if attempt is None:
        return "not started"
    try:
        failed = failed_attempt(folder)
    except ValueError:
        return "failed"
    return "failed" if failed == os.path.basename(attempt) else "cut short"


def interrupted_attempt(folder: str, run: RunSpec) -> Optional[str]:
    """The newest attempt folder of the run folder ``folder`` where that attempt of ``run`` was cut short after it
    wrote a checkpoint: the run has not finished, the attempt did not fail (``failed.json`` names another one, or
    is absent), its ``run.json`` describes ``run`` (:func:`same_run`: the grid was not changed since) and a
    ``checkpoints/agent_<step>.pt`` lies under it. None otherwise (an attempt cut short before its first
    checkpoint has nothing to go on from; one of other settings would mix two runs in one curve).
    """
    attempt = newest_attempt(folder)
    if attempt is None or os.path.isfile(os.path.join(folder, RESULT_FILE)):
        return None
    try:
        if failed_attempt(folder) == os.path.basename(attempt):
            return None
    except ValueError:
        return None  # an unreadable failure record: start afresh
    if newest_checkpoint(attempt) is None:
        return None
    try:
        with open(os.path.join(attempt, SPEC_FILE)) as file:
            record = json.load(file)
    except (OSError, json.JSONDecodeError):
        return None
    return attempt if isinstance(record, dict) and same_run(record, run) else None


def _record(out: str, run: RunSpec, attempt: str, outcome: Outcome) -> None:
    """Write what the attempt left: ``result.json`` for a finished run, else ``failed.json`` (and the log)."""
    folder = run_folder(out, run)
    if outcome.log is not None:  # run on another machine: its log came back with the outcome
        os.makedirs(attempt, exist_ok=True)
        with open(os.path.join(attempt, "log.txt"), "w") as file:
            file.write(outcome.log)
    record = {key: value for key, value in asdict(run).items() if key not in ("arguments", "evaluations")}
    record.update(evaluations_requested=run.evaluations, attempt=os.path.basename(attempt),
                  seconds=round(outcome.seconds, 1), code=outcome.provenance)
    if outcome.finished:
        write_json_atomically({**record, "evaluations": outcome.evaluations}, os.path.join(folder, RESULT_FILE))
        if os.path.exists(os.path.join(folder, FAILURE_FILE)):
            os.remove(os.path.join(folder, FAILURE_FILE))
    else:
        write_json_atomically({**record, "returncode": outcome.returncode, "error": outcome.error,
                               "log": os.path.join(attempt, "log.txt"), "log_tail": outcome.log_tail},
                              os.path.join(folder, FAILURE_FILE))


def settings_mismatch(result: Mapping[str, Any], run: RunSpec) -> List[str]:
    """How a finished run's ``result.json`` differs from ``run`` as the grid now defines it (empty: it does not):
    its budget, evaluations, episodes per evaluation, function or script.
    """
    differences = []
    made = {"timesteps": result.get("timesteps"), "eval_episodes": result.get("eval_episodes"),
            "evaluations": result.get("evaluations_requested", len(result.get("evaluations", []))),
            "function": result.get("function"),
            "script": os.path.basename(result["script"]) if result.get("script") else None}
    asked = {"timesteps": run.timesteps, "eval_episodes": run.eval_episodes, "evaluations": run.evaluations,
             "function": run.function, "script": os.path.basename(run.script) if run.script else None}
    for key, value in asked.items():
        if made[key] != value:
            differences.append(f"{key} {made[key]!r} (the grid now: {value!r})")
    return differences


def _check_finished_runs(out: str, runs: Sequence[RunSpec]) -> None:
    """Raise ``ValueError`` before anything runs where a finished run was made with other settings than the grid's."""
    stale = []
    for run in runs:
        if is_finished(out, run):
            with open(os.path.join(run_folder(out, run), RESULT_FILE)) as file:
                differences = settings_mismatch(json.load(file), run)
            if differences:
                stale.append(f"{run.key}: {', '.join(differences)}")
    if stale:
        raise ValueError(f"the grid folder {out} holds finished runs made with other settings than the grid's, which "
                         "a report would mix with the new ones:\n  " + "\n  ".join(stale) +
                         "\nuse another --out folder for the changed grid, or remove those runs' result.json to run them "
                         "again")


def _summary(run: RunSpec, outcome: Outcome) -> str:
    if outcome.stopped:
        return f"STOPPED {run.key} after {outcome.seconds:.0f} s by signal {outcome.signal_number}: the next run takes it up"
    if not outcome.finished:
        return f"FAILED {run.key} after {outcome.seconds:.0f} s: {outcome.error}"
    last = outcome.evaluations[-1]
    figures = ", ".join(f"{actions} {last[actions]['mean_return']:.3f}" for actions in ("sampled", "greedy")
                        if last.get(actions))
    return f"finished {run.key} in {outcome.seconds:.0f} s ({len(outcome.evaluations)} evaluations; last: {figures})"


def run_grid(grid: Grid, out: str, *, workers: Optional[int] = None, ray_address: Optional[str] = None,
             only: Optional[Callable[[RunSpec], bool]] = None,
             report: Callable[[str], None] = print) -> GridProgress:
    """Run every run of ``grid`` that has not finished, results in the folder ``out``.

    Args:
        grid: the runs.
        out: the grid's folder (created if needed; a later call with the same folder resumes the grid).
        workers: runs at a time on the local pool (default: one per core); with Ray, at most this many
            at a time (default: as many as the cluster takes).
        ray_address: run on Ray instead of the local pool: ``"auto"`` (the cluster this machine belongs
            to), ``"local"`` (start one here) or a cluster's address (``pip install 'marlparts[ray]'``).
        only: run only the runs for which this returns True.
        report: where progress lines go (one per finished or failed run, with the counts).

    Returns:
        The counts at the end; ``failed`` names the runs that failed in this call (each has a
        ``failed.json`` with the end of its log). A failed run does not stop the others.
    """
    out = os.path.abspath(out)  # the runs start in their scripts' folders
    runs = [run for run in grid.runs() if only is None or only(run)]
    _check_finished_runs(out, runs)
    progress = GridProgress(done=sum(is_finished(out, run) for run in runs))
    pending = [run for run in runs if not is_finished(out, run)]
    progress.left = len(pending)
    report(f"grid in {out}: {len(runs)} runs, {progress.done} finished before, {len(pending)} to run")
    lock = threading.Lock()  # runs start and end in the pool's threads
    attempts: Dict[RunSpec, str] = {}

    def start(run: RunSpec) -> Optional[str]:
        """Claim ``run`` and make its attempt folder (None where it is finished or held by another driver)."""
        folder = run_folder(out, run)
        os.makedirs(folder, exist_ok=True)
        with lock:
            progress.left -= 1
            if not claim(folder):
                progress.elsewhere.append(run.key)
                return None
            if is_finished(out, run):  # finished by another driver meanwhile
                release(folder)
                progress.done += 1
                return None
            progress.running += 1
            resumed = interrupted_attempt(folder, run) if run.resumable and ray_address is None else None
            attempts[run] = resumed or next_attempt(folder)
            if not resumed:
                os.makedirs(attempts[run], exist_ok=True)
                write_json_atomically(spec_record(run), os.path.join(attempts[run], SPEC_FILE))
            verb = f"resumed {run.key} in {os.path.basename(resumed)}" if resumed else f"started {run.key}"
            report(f"[{time.strftime('%H:%M:%S')}] {verb} | {progress.line()}")
            return attempts[run]

    def finish(run: RunSpec, outcome: Outcome) -> None:
        try:
            if not outcome.stopped:  # a run stopped by a signal is cut short, not failed: nothing to record
                _record(out, run, attempts[run], outcome)
        finally:
            release(run_folder(out, run))
        with lock:
            progress.running -= 1
            if outcome.finished:
                progress.done += 1
            elif outcome.stopped:
                progress.stopped.append(run.key)
            else:
                progress.failed.append(run.key)
            report(f"[{time.strftime('%H:%M:%S')}] {_summary(run, outcome)} | {progress.line()}")

    if not pending:
        return progress
    if ray_address is not None:
        _run_on_ray(pending, ray_address, workers, start, finish, lambda run: release(run_folder(out, run)))
    else:
        _run_on_local_pool(pending, workers or os.cpu_count() or 1, start, finish)
    return progress


def _run_on_local_pool(pending: Sequence[RunSpec], workers: int, start: Callable[[RunSpec], Optional[str]],
                       finish: Callable[[RunSpec, Outcome], None]) -> None:
    """Each run in a process of its own, ``workers`` at a time, started from threads of this process."""
    def one(run: RunSpec) -> None:
        attempt = start(run)
        if attempt is None:
            return
        try:
            claim_descriptor = held_claim(os.path.dirname(attempt))
            outcome = execute(run, os.path.join(attempt, "work"), _log_path(attempt),
                              keep_open=() if claim_descriptor is None else (claim_descriptor,))
        except Exception as error:  # the driver's own failure to start the run: reported as the run's
            outcome = Outcome(False, -1, error=f"{type(error).__name__}: {error}")
        except BaseException:  # the driver is stopped: the run stays unfinished, its claim goes
            release(os.path.dirname(attempt))
            raise
        finish(run, outcome)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, run) for run in pending]
        try:
            for future in concurrent.futures.as_completed(futures):
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _log_path(attempt: str) -> str:
    os.makedirs(attempt, exist_ok=True)
    return os.path.join(attempt, "log.txt")


def _run_on_ray(pending: Sequence[RunSpec], address: str, workers: Optional[int],
                start: Callable[[RunSpec], Optional[str]], finish: Callable[[RunSpec, Outcome], None],
                abandon: Callable[[RunSpec], None]) -> None:
    """Each run as a Ray task of one CPU (in a process of its own on the node that takes it)."""
    try:
        import ray
    except ImportError as error:
        raise ImportError("running a grid on Ray needs ray: pip install 'marlparts[ray]'") from error
    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1, max_retries=0)(execute_elsewhere)
    queue, in_flight = list(pending), {}
    limit = workers or len(queue)
    try:
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                run = queue.pop(0)
                if start(run) is not None:
                    in_flight[remote.remote(run)] = run
            if not in_flight:
                continue
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for reference in ready:
                run = in_flight.pop(reference)
                try:
                    outcome = ray.get(reference)
                except Exception as error:  # the task itself failed (its node went down...): reported as the run's
                    outcome = Outcome(False, -1, error=f"{type(error).__name__}: {error}")
                finish(run, outcome)
    finally:  # the driver is stopped: the runs in flight stay unfinished, their claims go
        for reference, run in in_flight.items():
            ray.cancel(reference, force=True)
            abandon(run)


def load_results(out: str) -> List[Dict[str, Any]]:
    """Every finished run's result in the grid folder ``out``: the ``result.json`` of each run's own folder,
    ``runs/<environment>/<task>/<algorithm>/seed_<seed>/``. Files of that name elsewhere (in a copy of a run's
    folder such as ``seed_0.old``, or written by a script below its attempt) are not results of the grid.

    Raises:
        ValueError: a run's folder holds the result of another run (its fields name other folders).
    """
    results = []
    runs = os.path.join(out, "runs")
    for path in sorted(glob.glob(os.path.join(glob.escape(runs), "*", "*", "*", "seed_*", RESULT_FILE),
                                  include_hidden=True)):
        folder = os.path.relpath(os.path.dirname(path), runs).split(os.sep)
        if not re.fullmatch(r"seed_-?\d+", folder[-1]):
            continue  # a copy of a run's folder, not a run's
        with open(path) as file:
            result = json.load(file)
        named = [str(result.get(key)) for key in ("environment", "task", "algorithm")] + [f"seed_{result.get('seed')}"]
        if named != folder:
            raise ValueError(f"{path} names the run {'/'.join(named)}, not the run of its folder: move it to its "
                             "own run's folder, or out of runs/")
        results.append(result)
    return sorted(results, key=lambda result: (result["environment"], result["task"], result["algorithm"],
                                               result["seed"]))

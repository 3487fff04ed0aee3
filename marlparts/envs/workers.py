"""Env copies stepped in worker processes that write into shared-memory buffers.

Only short commands cross the process boundary; observations, rewards and flags are written in place
by each worker's :class:`~marlparts.envs.copies.CopyBlock`.
"""

import multiprocessing as mp
import random
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from marlparts.envs.copies import CopyBlock, CopyFailure, EnvCopyError, allocate_buffers, as_arrays
from marlparts.envs.layout import EnvLayout
from marlparts.utils.seeding import derived_seed

#: The last element of the seed keys of a restarted worker's new copies, and of its global generators.
RESTARTED_COPIES, GLOBAL_GENERATORS = 1, 2
#: Seconds that :meth:`WorkerCopies.close` waits for the replies a command still owes, then for the copies to close.
CLOSE_TIMEOUT = 5.0


def seed_global_generators(seed: Optional[int]) -> None:
    """Seed this process's global generators (Python's, NumPy's, PyTorch's if loaded) with ``seed``, or from fresh
    entropy where it is None: a forked worker would otherwise draw the same numbers as every other worker.
    """
    random.seed(seed)
    np.random.seed(None if seed is None else seed % 2 ** 32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed) if seed is not None else torch.seed()


def _worker_main(connection: Any, factory: Callable[[], Any], rows: List[int], layout: EnvLayout,
                 raw_buffers: Dict[str, Any], num_envs: int, recover: bool, rebuild_seed: Optional[int],
                 rebuilds: Dict[int, int], generator_seed: Optional[int], inherited: Sequence[Any]) -> None:
    """Command loop of one worker process: ``reset``, ``step``, ``render``, ``close``. ``reset`` and ``step``
    answer with the copies rebuilt on the way (without the exceptions, which stay in this process).

    ``inherited`` are the main process's ends of the workers' pipes, which a forked worker holds too: they are
    closed first, so that the worker reads the end of its pipe (and stops) when the main process is gone.
    """
    for end in inherited:
        end.close()
    seed_global_generators(generator_seed)
    block = None
    try:
        block = CopyBlock([factory() for _ in rows], rows, layout, as_arrays(raw_buffers, layout, num_envs),
                          factory if recover else None, rebuild_seed, rebuilds)
        connection.send(("ok", None))
        while True:
            command, argument = connection.recv()
            try:
                if command in ("reset", "step"):
                    failures = block.reset(argument) if command == "reset" else block.step()
                    connection.send(("ok", [failure._replace(error=None) for failure in failures]))
                elif command == "render":
                    connection.send(("ok", block.render()))
                elif command == "close":
                    block.close()
                    connection.send(("ok", None))
                    return
            except Exception as error:  # report to the main process, which raises
                connection.send(("error", f"{error}\n{traceback.format_exc()}"))
                if command == "close":
                    return
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except Exception as error:
        try:
            connection.send(("error", f"worker failed to start: {error!r}\n{traceback.format_exc()}"))
        except (BrokenPipeError, OSError):
            pass


class WorkerCopies:
    """Copies split over ``workers`` processes that step in parallel, writing to shared memory.

    Worker processes are forked where the platform allows it, so an env factory may be a
    lambda; elsewhere the factory must be picklable. Each worker seeds its global generators (Python's,
    NumPy's, PyTorch's) from its own stream, so copies that draw from them do not replay one another.

    With ``recover``, copies that raise are rebuilt inside their worker (see :class:`CopyBlock`), and a
    worker process that dies is started again: its copies are new, and their episodes end as failed.

    A command interrupted in this process before every worker answered (an exception raised while waiting,
    such as ``KeyboardInterrupt``) leaves the copies out of step with it: later commands raise
    :class:`EnvCopyError` rather than return the interrupted command's results; :meth:`close` still works.
    """

    def __init__(self, factory: Callable[[], Any], layout: EnvLayout, num_envs: int, workers: int, *,
                 recover: bool = False, rebuild_seed: Optional[int] = None) -> None:
        if workers > num_envs:
            raise ValueError(f"workers={workers} is more than num_envs={num_envs}")
        methods = mp.get_all_start_methods()
        self.context = mp.get_context("fork" if "fork" in methods else "spawn")
        self.raw = allocate_buffers(layout, num_envs, shared=True, context=self.context)
        self.buffers = as_arrays(self.raw, layout, num_envs)
        self.factory, self.layout, self.num_envs, self.recover = factory, layout, num_envs, recover
        self.rebuild_seed, self.restarts = rebuild_seed, 0
        self.rows = [[int(r) for r in rows] for rows in np.array_split(np.arange(num_envs), workers)]
        self.rebuilds = {row: 0 for row in range(num_envs)}  # how many times each copy was rebuilt in its worker
        self.connections: List[Any] = [None] * workers
        self.processes: List[Any] = [None] * workers
        self.owed = [0] * workers  # replies each worker still owes for commands sent
        self.pending = ""  # the last command sent
        self.closed = False
        try:
            for index in range(workers):
                self._start_worker(index)
            self._collect("start")
        except BaseException:
            self._stop_processes(0.0, terminate_now=range(workers))
            raise

    def _start_worker(self, index: int) -> None:
        """Start worker ``index`` (again, in place of one that died); it owes the reply that it started."""
        if self.connections[index] is not None:  # the pipe of a worker that died
            self.connections[index].close()
            self.connections[index] = None
        parent, child = self.context.Pipe()
        fork = self.context.get_start_method() == "fork"
        inherited = [parent] + [connection for connection in self.connections if connection is not None] if fork else []
        rows = self.rows[index]
        process = self.context.Process(target=_worker_main, daemon=True, args=(
            child, self.factory, rows, self.layout, self.raw, self.num_envs, self.recover, self.rebuild_seed,
            {row: self.rebuilds[row] for row in rows},
            derived_seed(self.rebuild_seed, index, self.restarts, GLOBAL_GENERATORS), inherited))
        self.owed[index] = 1
        try:
            process.start()
        except BaseException:  # e.g. no fork possible: nothing of it is kept
            self.owed[index] = 0
            parent.close()
            raise
        finally:
            child.close()
        self.connections[index], self.processes[index] = parent, process

    def _send(self, index: int, message: Any) -> bool:
        """Send ``message`` to worker ``index``, counting the reply it owes; ``False`` where the worker is gone."""
        if self.connections[index] is None:  # a worker that could not be started again
            return False
        self.owed[index] += 1  # counted before: an interruption just after the send still leaves the count
        try:
            self.connections[index].send(message)
            return True
        except (BrokenPipeError, OSError):
            self.owed[index] -= 1
            return False

    def _receive(self, index: int) -> Optional[Any]:
        """The next reply of worker ``index``, ``(status, payload)``; None where the worker is gone."""
        try:
            reply = self.connections[index].recv()
        except (EOFError, OSError):
            self.owed[index] = 0
            return None
        self.owed[index] -= 1
        return reply

    def _refuse_if_out_of_step(self, command: str) -> None:
        if self.closed:
            raise RuntimeError(f"cannot {command}: these env copies were closed")
        if any(self.owed):
            waiting = [index for index, owed in enumerate(self.owed) if owed]
            raise EnvCopyError(f"cannot {command}: an earlier {self.pending} was interrupted before workers {waiting} "
                               f"answered, so the env copies are out of step with this process (their results would "
                               f"be those of the interrupted command); close() this env and make a new one")

    def _broadcast(self, command: str, argument: Any = None) -> List[Any]:
        self._refuse_if_out_of_step(command)
        self.pending = command
        sent = [self._send(index, (command, argument)) for index in range(len(self.connections))]
        return self._collect(command, sent)

    def _collect(self, command: str, sent: Optional[Sequence[bool]] = None) -> List[Any]:
        """Every worker's reply to ``command`` (those ``sent`` it); a worker that is gone is started again where
        copies recover, else named. Every reply is read before an error is raised.
        """
        results, errors = [], []
        for index in range(len(self.connections)):
            reply = self._receive(index) if sent is None or sent[index] else None
            if reply is None and self.recover and command in ("reset", "step"):  # the worker died: start it again
                try:
                    results.append(self._restart_worker(index, command))
                except (EnvCopyError, OSError) as error:
                    errors.append(str(error))
            elif reply is None:
                errors.append(self._death_message(index, command))
            elif reply[0] == "error":
                errors.append(f"worker {index} during {command}: {reply[1]}")
            else:
                if command in ("reset", "step"):
                    self._count_rebuilds(reply[1])
                results.append(reply[1])
        if errors:
            raise EnvCopyError("\n".join(errors))
        return results

    def _death_message(self, index: int, command: str) -> str:
        if self.connections[index] is None:
            return (f"worker {index}, which steps env copies {self.rows[index]}, died before {command} and could not "
                    f"be started again")
        self.processes[index].join(timeout=5)
        return (f"worker {index}, which steps env copies {self.rows[index]}, died during {command} "
                f"(exit code {self.processes[index].exitcode})")

    def _restart_worker(self, index: int, command: str) -> List[CopyFailure]:
        """Start worker ``index`` again and reset its new copies; each of its rows ends its episode as failed."""
        message = self._death_message(index, command)
        self.restarts += 1
        try:
            self._start_worker(index)
        except OSError as error:
            raise EnvCopyError(f"{message}, and it could not be started again: {error!r}") from error
        seeds: List[Optional[int]] = [None] * self.num_envs
        for row in self.rows[index]:  # the new copies' episodes drawn from the run's seed
            seeds[row] = derived_seed(self.rebuild_seed, row, self.restarts, RESTARTED_COPIES)
        self._restarted_reply(index, message)  # it started
        rebuilt = self._restarted_reply(index, message, ("reset", seeds))  # copies rebuilt in their first reset
        self._count_rebuilds(rebuilt)
        rows = self.rows[index]
        self.buffers["episode_end"][rows] = command == "step"
        self.buffers["failed"][rows] = command == "step"
        return [CopyFailure(row, command, message, None) for row in rows] + list(rebuilt)  # each failure counts

    def _restarted_reply(self, index: int, message: str, request: Optional[Any] = None) -> Any:
        """The payload of the next reply of worker ``index``, started again after ``message`` (to ``request``, sent
        first if given); :class:`EnvCopyError` where it died too or answered with an error.
        """
        reply = self._receive(index) if request is None or self._send(index, request) else None
        if reply is None:
            raise EnvCopyError(f"{message}, and the worker started in its place died too")
        if reply[0] == "error":
            raise EnvCopyError(f"{message}, and its restart failed: {reply[1]}")
        return reply[1]

    def _count_rebuilds(self, failures: Sequence[CopyFailure]) -> None:
        """Count the copies rebuilt in a worker: the next rebuild of each draws the next seed of its row."""
        for failure in failures:
            self.rebuilds[failure.row] += 1

    def reset(self, seeds: Optional[Sequence[Optional[int]]]) -> List[CopyFailure]:
        """Reset every copy (copy ``i`` with ``seeds[i]`` if given); the copies rebuilt on the way."""
        return [failure for failures in self._broadcast("reset", None if seeds is None else list(seeds))
                for failure in failures]

    def step(self) -> List[CopyFailure]:
        """Step every copy, all workers at once; the copies rebuilt on the way."""
        return [failure for failures in self._broadcast("step") for failure in failures]

    def render(self) -> Any:
        """Render copy 0 (in worker 0)."""
        self._refuse_if_out_of_step("render")
        self.pending = "render"
        reply = self._receive(0) if self._send(0, ("render", None)) else None
        if reply is None:
            raise EnvCopyError(self._death_message(0, "render"))
        if reply[0] == "error":
            raise EnvCopyError(f"worker 0 during render: {reply[1]}")
        return reply[1]

    def start_recording(self) -> None:
        """Frames stay in the worker processes: record from copies stepped in this process."""
        raise ValueError("video recording needs env copies stepped in this process (workers=0); the evaluation "
                         "copies the trainer makes are")

    def close(self) -> None:
        """Close the copies and end the workers: the replies an interrupted command still owes are read (for up to
        :data:`CLOSE_TIMEOUT` seconds), every worker that is free is asked to close its copies and given
        :data:`CLOSE_TIMEOUT` seconds to do so, and the others (a copy that hangs) are terminated. An error of a
        copy's ``close`` is raised afterwards.
        """
        if self.closed:
            return
        self.closed = True
        workers = [index for index, connection in enumerate(self.connections) if connection is not None]
        deadline = time.monotonic() + CLOSE_TIMEOUT
        for index in workers:
            try:
                while self.owed[index] and self.connections[index].poll(max(deadline - time.monotonic(), 0.0)):
                    if self._receive(index) is None:
                        break
            except OSError:
                self.owed[index] = 0
        busy = [index for index in workers if self.owed[index]]  # still in the interrupted command
        asked = [index for index in workers if index not in busy and self._send(index, ("close", None))]
        deadline, errors = time.monotonic() + CLOSE_TIMEOUT, []
        for index in asked:
            try:
                ready = self.connections[index].poll(max(deadline - time.monotonic(), 0.0))
            except OSError:
                continue
            reply = self._receive(index) if ready else None
            if reply is not None and reply[0] == "error":
                errors.append(f"worker {index} during close: {reply[1]}")
        self._stop_processes(max(deadline - time.monotonic(), 0.0), terminate_now=busy)
        if errors:
            raise EnvCopyError("\n".join(errors))

    def _stop_processes(self, timeout: float, terminate_now: Sequence[int] = ()) -> None:
        """Terminate the workers ``terminate_now``, join the others for up to ``timeout`` seconds in all and
        terminate those still alive, then close the pipes.
        """
        for index in terminate_now:
            if self.processes[index] is not None:
                self.processes[index].terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is None:
                continue
            process.join(timeout=max(deadline - time.monotonic(), 0.0))
            if process.is_alive():
                process.terminate()
                process.join(timeout=1)
        for connection in self.connections:
            if connection is not None:
                connection.close()

"""Env copies stepped in worker processes that write into shared-memory buffers.

Only short commands cross the process boundary; observations, rewards and flags are written in place
by each worker's :class:`~marlparts.envs.copies.CopyBlock`.
"""

import multiprocessing as mp
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from marlparts.envs.copies import CopyBlock, CopyFailure, EnvCopyError, allocate_buffers, as_arrays
from marlparts.envs.layout import EnvLayout
from marlparts.utils.seeding import derived_seed


def _worker_main(connection: Any, factory: Callable[[], Any], rows: List[int], layout: EnvLayout,
                 raw_buffers: Dict[str, Any], num_envs: int, recover: bool, rebuild_seed: Optional[int]) -> None:
    """Command loop of one worker process: ``reset``, ``step``, ``render``, ``close``. ``reset`` and ``step``
    answer with the copies rebuilt on the way (without the exceptions, which stay in this process).
    """
    block = None
    try:
        block = CopyBlock([factory() for _ in rows], rows, layout, as_arrays(raw_buffers, layout, num_envs),
                          factory if recover else None, rebuild_seed)
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
    lambda; elsewhere the factory must be picklable.

    With ``recover``, copies that raise are rebuilt inside their worker (see :class:`CopyBlock`), and a
    worker process that dies is started again: its copies are new, and their episodes end as failed.
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
        self.connections: List[Any] = [None] * workers
        self.processes: List[Any] = [None] * workers
        for index in range(workers):
            self._start_worker(index)
        self._collect("start")

    def _start_worker(self, index: int) -> None:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker_main, daemon=True, args=(
            child, self.factory, self.rows[index], self.layout, self.raw, self.num_envs, self.recover,
            derived_seed(self.rebuild_seed, index, self.restarts)))
        process.start()
        child.close()
        self.connections[index], self.processes[index] = parent, process

    def _broadcast(self, command: str, argument: Any = None) -> List[Any]:
        for connection in self.connections:
            connection.send((command, argument))
        return self._collect(command)

    def _collect(self, command: str) -> List[Any]:
        results, errors = [], []
        for index, connection in enumerate(self.connections):
            try:
                status, payload = connection.recv()
            except EOFError:
                if self.recover and command in ("reset", "step"):
                    results.append(self._restart_worker(index, command))
                    continue
                status, payload = "error", "the worker process died"
            if status == "error":
                errors.append(f"worker {index} during {command}: {payload}")
            results.append(payload)
        if errors:
            raise EnvCopyError("\n".join(errors))
        return results

    def _restart_worker(self, index: int, command: str) -> List[CopyFailure]:
        """Start worker ``index`` again and reset its new copies; each of its rows ends its episode as failed."""
        self.processes[index].join(timeout=5)
        exit_code = self.processes[index].exitcode
        self.restarts += 1
        self._start_worker(index)
        connection = self.connections[index]
        seeds: List[Optional[int]] = [None] * self.num_envs
        for row in self.rows[index]:  # the new copies' episodes drawn from the run's seed
            seeds[row] = derived_seed(self.rebuild_seed, row, self.restarts, 1)
        for request in (None, ("reset", seeds)):
            if request is not None:
                connection.send(request)
            status, payload = connection.recv()
            if status == "error":
                raise EnvCopyError(f"worker {index} died during {command} (exit code {exit_code}) and its restart "
                                   f"failed: {payload}")
        rows = self.rows[index]
        self.buffers["episode_end"][rows] = command == "step"
        self.buffers["failed"][rows] = command == "step"
        message = f"worker {index}, which steps env copies {rows}, died during {command} (exit code {exit_code})"
        return [CopyFailure(row, command, message, None) for row in rows]

    def reset(self, seeds: Optional[Sequence[Optional[int]]]) -> List[CopyFailure]:
        """Reset every copy (copy ``i`` with ``seeds[i]`` if given); the copies rebuilt on the way."""
        return [failure for failures in self._broadcast("reset", None if seeds is None else list(seeds))
                for failure in failures]

    def step(self) -> List[CopyFailure]:
        """Step every copy, all workers at once; the copies rebuilt on the way."""
        return [failure for failures in self._broadcast("step") for failure in failures]

    def render(self) -> Any:
        """Render copy 0 (in worker 0)."""
        self.connections[0].send(("render", None))
        status, payload = self.connections[0].recv()
        if status == "error":
            raise EnvCopyError(f"worker 0 during render: {payload}")
        return payload

    def start_recording(self) -> None:
        """Frames stay in the worker processes: record from copies stepped in this process."""
        raise ValueError("video recording needs env copies stepped in this process (workers=0); the evaluation "
                         "copies the trainer makes are")

    def close(self) -> None:
        """Close the copies and join the workers."""
        for connection in self.connections:
            try:
                connection.send(("close", None))
                connection.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()

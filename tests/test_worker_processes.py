"""Env copies in worker processes: what happens when a step is interrupted, a worker dies or a copy hangs,
and how the processes end."""

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.envs.copies import EnvCopyError
from marlparts.utils.seeding import copy_seeds

posix_only = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX signals and fork")


class SlowEnv(CountingEnv):
    """Sleeps ``seconds`` in each step."""

    def __init__(self, seconds=0.3, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def step(self, actions):
        time.sleep(self.seconds)
        return super().step(actions)


class GlobalRandomEnv(CountingEnv):
    """Draws its first observation from NumPy's global generator and ignores ``reset``'s seed."""

    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed=None, options=options)
        draw = np.float32(np.random.random())
        return {uid: np.array([draw, 0, 0], dtype=np.float32) for uid in observations}, infos


class CloseRaisesEnv(CountingEnv):
    """Its ``close`` raises once it has stepped (the probe the wrapper reads the spaces from closes cleanly)."""

    def step(self, actions):
        self.stepped = True
        return super().step(actions)

    def close(self):
        if getattr(self, "stepped", False):
            raise RuntimeError("the simulator could not be shut down")


FAILING_SEEDS = set(copy_seeds(7, 4)[2:])  # copies 2 and 3 of seed 7 raise at their second step


class SeededFailEnv(CountingEnv):
    """Observations drawn from the generator of its reset's seed; raises at step 2 after a reset with one of
    :data:`FAILING_SEEDS`."""

    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed=seed, options=options)
        if seed is not None:  # a reset without a seed goes on drawing from the generator
            self.generator = np.random.default_rng(seed)
            self.fails = seed in FAILING_SEEDS
        return self.draw(observations), infos

    def step(self, actions):
        if self.fails and self.t == 1:
            raise RuntimeError("simulated failure")
        observations, *rest = super().step(actions)
        return (self.draw(observations), *rest)

    def draw(self, observations):
        return {uid: np.array([self.generator.random(), 0, 0], dtype=np.float32) for uid in observations}


class RestartTroubleEnv(CountingEnv):
    """Once ``TROUBLE`` is set in the environment, a copy built in a worker process is slow to build (``"slow"``)
    or ends its process in ``reset`` (``"crash"``): the copies of a worker started again after a death."""

    def __init__(self):
        super().__init__(max_steps=50, leave_at=-1)
        if in_worker() and os.environ.get("TROUBLE") == "slow":
            time.sleep(0.6)

    def reset(self, seed=None, options=None):
        if in_worker() and os.environ.get("TROUBLE") == "crash":
            os._exit(11)
        return super().reset(seed=seed, options=options)


def in_worker():
    return mp.current_process().name != "MainProcess"


@pytest.fixture
def trouble(monkeypatch):
    """Sets ``TROUBLE`` for the workers forked after it is set."""
    return lambda kind: monkeypatch.setenv("TROUBLE", kind)


def kill_worker(env, index):
    process = env.copies.processes[index]
    os.kill(process.pid, signal.SIGKILL)
    process.join()


def actions(env, value=0):
    return {uid: torch.full((env.num_envs, 1), value, dtype=torch.long) for uid in env.possible_agents}


class Interrupted(Exception):
    pass


def step_interrupted_after(env, seconds, *, value=0):
    """Step ``env``, interrupted by an exception in this process after ``seconds`` (a time limit's signal)."""
    def interrupt(*_):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(Interrupted):
            env.step(actions(env, value))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@posix_only
def test_a_step_interrupted_while_the_workers_step_makes_the_next_call_refuse_not_return_the_old_results():
    env = wrap_env(lambda: SlowEnv(max_steps=50, leave_at=-1), num_envs=2, workers=2, seed=0)
    env.reset()
    step_interrupted_after(env, 0.1, value=1)
    with pytest.raises(EnvCopyError, match="interrupted"):
        env.step(actions(env, 2))  # its results would be those of the interrupted step
    with pytest.raises(EnvCopyError, match="interrupted"):
        env.reset()
    began = time.perf_counter()
    env.close()
    assert time.perf_counter() - began < 5
    assert not any(process.is_alive() for process in env.copies.processes)


@posix_only
def test_a_worker_that_dies_between_steps_is_started_again_when_failures_are_allowed():
    env = wrap_env(CountingEnv, num_envs=4, workers=2, seed=0, max_env_failures=5)
    env.reset()
    env.step(actions(env))
    process = env.copies.processes[1]
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    with pytest.warns(RuntimeWarning, match="worker 1"):
        infos = env.step(actions(env))[4]
    assert infos["failed"].flatten().tolist() == [False, False, True, True]
    assert env.env_failures == 2
    env.close()


@posix_only
def test_a_dead_worker_is_named_with_its_copies_and_exit_code_when_no_failure_is_allowed():
    env = wrap_env(CountingEnv, num_envs=4, workers=2, seed=0)
    env.reset()
    process = env.copies.processes[1]
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    with pytest.raises(EnvCopyError, match=r"worker 1, which steps env copies \[2, 3\].*exit code -9"):
        env.step(actions(env))
    env.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_closed_env_refuses_to_step_or_reset(workers):
    env = wrap_env(CountingEnv, num_envs=2, workers=workers, seed=0)
    env.reset()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(actions(env))
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


@posix_only
def test_close_does_not_wait_for_a_copy_that_hangs():
    env = wrap_env(lambda: SlowEnv(seconds=30, max_steps=50, leave_at=-1), num_envs=2, workers=2, seed=0)
    env.reset()
    step_interrupted_after(env, 0.2)
    began = time.perf_counter()
    env.close()
    assert time.perf_counter() - began < 8  # 5 s for the hung step's reply, then terminated at once
    assert not any(process.is_alive() for process in env.copies.processes)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_of_an_envs_close_is_raised_after_every_copy_is_closed(workers):
    closed = []

    class Recorded(CloseRaisesEnv):
        def close(self):
            closed.append(1)
            super().close()

    env = wrap_env(Recorded, num_envs=4, workers=workers, seed=0)
    env.reset()
    env.step(actions(env))
    closed.clear()  # (the probe's close, with workers)
    began = time.perf_counter()
    with pytest.raises(EnvCopyError, match="could not be shut down"):
        env.close()
    assert time.perf_counter() - began < 4
    if workers == 0:
        assert len(closed) == 4  # every copy, not only those before the first that raised
    else:
        assert not any(process.is_alive() for process in env.copies.processes)


@posix_only
def test_copies_in_different_workers_do_not_replay_one_global_random_stream():
    random.seed(0)
    env = wrap_env(GlobalRandomEnv, num_envs=4, workers=4, seed=7)
    first = env.reset()[0]["agent_0"][:, 0].tolist()
    env.close()
    assert len(set(first)) == 4, first


def test_a_failed_start_leaves_no_worker_process_behind(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from toy_envs import CountingEnv
        from marlparts.envs import wrap_env
        import multiprocessing as mp

        def factory():
            if mp.current_process().name != "MainProcess" and os.environ.get("FAIL_IN_WORKER") == "1":
                raise RuntimeError("no licence for the simulator")
            return CountingEnv()

        os.environ["FAIL_IN_WORKER"] = "1"
        try:
            wrap_env(factory, num_envs=4, workers=2, seed=0)
        except Exception as error:
            print("raised", type(error).__name__)
        print("children", len(mp.active_children()))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "raised EnvCopyError" in result.stdout, result.stdout + result.stderr
    assert "children 0" in result.stdout, result.stdout + result.stderr


@posix_only
def test_workers_end_when_the_main_process_is_killed(tmp_path):
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from toy_envs import CountingEnv
        from marlparts.envs import wrap_env
        env = wrap_env(CountingEnv, num_envs=4, workers=2, seed=0)
        env.reset()
        open({str(pids)!r}, "w").write(" ".join(str(p.pid) for p in env.copies.processes))
        time.sleep(60)
    """)
    main = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while not (pids.exists() and pids.read_text()) and time.time() < deadline:
            time.sleep(0.1)
        workers = [int(pid) for pid in pids.read_text().split()]
    finally:
        main.kill()
        main.wait()
    deadline = time.time() + 10
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in workers if process_alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "worker processes outlived their main process"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which an init process reaps, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@posix_only
def test_rebuilt_copies_play_the_same_episodes_whichever_the_number_of_workers():
    def trajectory(workers):
        env = wrap_env(lambda: SeededFailEnv(max_steps=4, leave_at=-1), num_envs=4, workers=workers, seed=7,
                       max_env_failures=2)
        rows = [env.reset()[0]["agent_0"][:, 0]]
        with pytest.warns(RuntimeWarning, match="rebuilt"):
            for _ in range(6):
                rows.append(env.step(actions(env))[0]["agent_0"][:, 0])
        assert env.env_failures == 2
        env.close()
        return torch.stack(rows)

    in_process = trajectory(0)
    for workers in (2, 4):
        assert torch.equal(trajectory(workers), in_process), workers


@posix_only
def test_a_step_interrupted_while_a_dead_worker_is_started_again_is_noticed(trouble):
    env = wrap_env(RestartTroubleEnv, num_envs=2, workers=2, seed=0, max_env_failures=5)
    env.reset()
    env.step(actions(env, 1))
    trouble("slow")
    kill_worker(env, 1)
    step_interrupted_after(env, 0.3, value=2)  # while the new worker builds its copy
    with pytest.raises(EnvCopyError, match="interrupted"):
        env.step(actions(env, 3))
    env.close()
    assert not any(process.is_alive() for process in env.copies.processes)


@posix_only
def test_a_worker_started_again_that_dies_too_is_named_and_the_others_replies_are_read(trouble):
    env = wrap_env(RestartTroubleEnv, num_envs=4, workers=2, seed=0, max_env_failures=5)
    env.reset()
    trouble("crash")
    kill_worker(env, 0)
    for _ in range(2):  # the second time too: not taken for an interrupted step
        with pytest.raises(EnvCopyError, match=r"worker 0, which steps env copies \[0, 1\].*started in its place died"):
            env.step(actions(env))
    env.close()


@posix_only
def test_rendering_with_a_dead_worker_names_it():
    env = wrap_env(CountingEnv, num_envs=2, workers=2, seed=0)
    env.reset()
    kill_worker(env, 0)
    with pytest.raises(EnvCopyError, match=r"worker 0, which steps env copies \[0\], died during render"):
        env.render()
    env.close()


@posix_only
def test_a_dead_worker_that_cannot_be_started_again_is_named_and_close_still_ends_the_others(monkeypatch):
    env = wrap_env(lambda: CountingEnv(max_steps=50, leave_at=-1), num_envs=4, workers=2, seed=0, max_env_failures=5)
    env.reset()
    others = env.copies.processes[1]
    kill_worker(env, 0)

    class NoFork(env.copies.context.Process):
        def start(self):
            raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(env.copies.context, "Process", NoFork)
    with pytest.raises(EnvCopyError, match=r"worker 0, which steps env copies \[0, 1\].*could not be started"):
        env.step(actions(env))
    env.close()
    assert not others.is_alive()


class MarkedFailuresEnv(CountingEnv):
    """Raises once in ``reset`` or ``step`` when a marker file of ``folder`` says so (:meth:`take`), and logs its
    resets' seeds."""

    folder = None

    def take(self, name):
        """Whether the marker ``name`` is there for this process (it names a process id, or none: any), removed."""
        path = os.path.join(self.folder, name)
        try:
            with open(path) as marker:
                if marker.read() not in ("", str(os.getpid())):
                    return False
            os.remove(path)
            return True
        except FileNotFoundError:
            return False

    def reset(self, seed=None, options=None):
        if self.take("fail_reset"):
            raise RuntimeError("reset fails once")
        with open(os.path.join(self.folder, "seeds"), "a") as log:
            log.write(f"{seed}\n")
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.take("fail_step"):
            raise RuntimeError("step fails once")
        return super().step(actions)


def marked_failures_env(folder, max_env_failures):
    """Two copies of :class:`MarkedFailuresEnv` with markers in ``folder``, one per worker, reset."""
    MarkedFailuresEnv.folder = str(folder)
    env = wrap_env(lambda: MarkedFailuresEnv(max_steps=50, leave_at=-1), num_envs=2, workers=2, seed=0,
                   max_env_failures=max_env_failures)
    env.reset()
    return env


@posix_only
def test_a_copy_rebuilt_in_a_restarted_workers_reset_counts_for_the_next_rebuilds_seed(tmp_path):
    env = marked_failures_env(tmp_path, max_env_failures=10)
    seeds = tmp_path / "seeds"
    seeds.write_text("")
    kill_worker(env, 1)
    (tmp_path / "fail_reset").touch()  # the new worker's copy raises in its first reset: rebuilt there
    with pytest.warns(RuntimeWarning):
        env.step(actions(env))
    kill_worker(env, 1)
    with pytest.warns(RuntimeWarning):
        env.step(actions(env))  # started again: its copy's count of rebuilds must go on
    (tmp_path / "fail_step").write_text(str(env.copies.processes[1].pid))  # copy 1 raises: rebuilt again
    with pytest.warns(RuntimeWarning):
        env.step(actions(env))
    env.close()
    used = [line for line in seeds.read_text().splitlines() if line != "None"]
    # the first rebuild of copy 1, the second restart's reset, the second rebuild: no seed twice
    assert len(used) == 3 and len(set(used)) == 3, used


@posix_only
def test_a_copy_that_fails_in_a_restarted_workers_first_reset_counts_as_a_failure(tmp_path):
    env = marked_failures_env(tmp_path, max_env_failures=1)
    kill_worker(env, 1)
    (tmp_path / "fail_reset").touch()  # the copy of the worker started in its place raises in its first reset
    with pytest.raises(EnvCopyError, match="more than max_env_failures=1"):
        with pytest.warns(RuntimeWarning):
            env.step(actions(env))
    env.close()

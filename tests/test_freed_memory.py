"""A trainer keeps the memory of large freed tensors in the process for the next ones of that size.

Without it, glibc hands the freed top of its heap back to the kernel whenever more than twice its
largest recent block is free, and the next update's activations are paged in again, one zeroed page
at a time (about 20,000 page faults an update in the VMAS balance example). Each case runs in a fresh
process: the allocator's settings belong to the process, and another test may already have changed them.
"""

import pathlib
import platform
import subprocess
import sys
import textwrap

import pytest

from marlparts.utils import memory

glibc_only = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="the allocator settings are glibc's")

# round_faults() takes five 6 MiB tensors (touching every page), frees them, and returns the page faults it took.
ROUNDS = textwrap.dedent("""
    import resource, torch

    def round_faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        held = [torch.ones(6 * 2 ** 20 // 4) for _ in range(5)]
        del held
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
""")


def faults_per_round(setup: str) -> list:
    """The page faults of five rounds after a first one, after ``setup`` ran in a fresh interpreter."""
    script = ROUNDS + textwrap.dedent(setup) + "\nround_faults()\nprint([round_faults() for _ in range(5)])\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [int(part) for part in result.stdout.strip().splitlines()[-1].strip("[]").split(",")]


TRAINER = """
    from mpe2 import simple_spread_v3
    from marlparts.envs import wrap_env
    from marlparts.trainers import SequentialTrainer
    import sys
    sys.path.insert(0, {tests!r})
    from helpers import build_mappo
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=2, seed=0)
    agent = build_mappo(env, directory={directory!r}, cfg={{"experiment": {{"tensorboard": False, "csv": False}}}})
    SequentialTrainer(env=env, agents=agent, cfg={{"disable_progressbar": True{extra}}})
"""


@glibc_only
def test_a_trainer_keeps_freed_tensor_memory_for_the_next_tensors_without_page_faults(tmp_path):
    tests = str(pathlib.Path(__file__).parent)
    kept = faults_per_round(TRAINER.format(tests=tests, directory=str(tmp_path), extra=""))
    assert sum(kept) < 3000, kept  # at most one tensor's pages while the heap settles
    declined = faults_per_round(TRAINER.format(tests=tests, directory=str(tmp_path),
                                               extra=', "reuse_freed_memory": False'))
    assert sum(declined) > 7000, declined  # without the setting the rounds fault (7,680 pages in a whole round)


def test_reuse_freed_memory_changes_nothing_where_the_c_library_is_not_glibc(monkeypatch):
    monkeypatch.setattr(memory.platform, "libc_ver", lambda: ("musl", "1.2"))
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda *args: pytest.fail("no C library may be loaded"))
    assert memory.reuse_freed_memory() is False

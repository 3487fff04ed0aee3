"""Data-parallel training with torchrun on the CPU (gloo): two ranks stay in step and learn."""

import pathlib
import subprocess
import sys
import warnings

import pytest
import torch

HERE = pathlib.Path(__file__).resolve().parent


def torchrun(out, *arguments):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(HERE / "distributed_run.py"), str(out), *arguments],
                          capture_output=True, text=True, timeout=600)


def ranks(out):
    return [torch.load(out / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]


def assert_identical_ranks(out):
    first, second = ranks(out)
    assert first["world_size"] == second["world_size"] == 2
    for name in first["parts"]:  # models, targets, preprocessors, value normalisers
        assert all(torch.equal(a, b) for a, b in zip(first["parts"][name], second["parts"][name])), name
    assert not set(first["copy_seeds"]) & set(second["copy_seeds"]), "the ranks' env copies share seed streams"
    assert first["episodes"] == 32 and first["mean_return"] == second["mean_return"]  # every rank's episodes, reported alike
    return first


def test_two_ranks_of_mappo_happo_and_maddpg_stay_identical_and_ranks_that_differ_are_a_clear_error(tmp_path):
    """One torchrun serves every check (each start of two ranks costs seconds): MAPPO, HAPPO (updating the agents
    in the same order on both ranks) and MADDPG one after the other in one process group, then MAPPO with a
    different observation space on each rank, where both ranks must raise an error that names it (each rank
    handles it and writes its message; `--different-spaces` leaves it unhandled, as benchmarks/torchrun_exit.py runs it)."""
    done = torchrun(tmp_path, "--algorithms", "mappo", "happo", "maddpg", "different-spaces")
    assert done.returncode == 0, done.stderr[-3000:]
    first = assert_identical_ranks(tmp_path / "mappo")
    # each step rewards the action (0..3): random actions score 7.5 per 5-step episode, the best policy 15
    assert first["mean_return_before"] < 12 and first["mean_return"] >= 14.5
    folder = tmp_path / "mappo" / "runs" / "run"
    assert (folder / "evaluation.json").exists() and len(list(folder.glob("events.out.tfevents.*"))) == 1
    assert_identical_ranks(tmp_path / "happo")
    assert_identical_ranks(tmp_path / "maddpg")
    for rank in (0, 1):  # each rank raises, naming what differs: neither waits for the other in a collective
        error = (tmp_path / "different-spaces" / f"rank{rank}.txt").read_text()
        assert error.startswith("the ranks do not agree on what they train: the observation space of agent_0 is"), error
    # a process group left alive into the interpreter's finalisation can abort a rank at exit (SIGABRT,
    # "terminate called without an active exception": a gloo worker thread drops the last reference to a
    # tensor and needs the GIL that finalisation took away): the library destroys it when the script
    # ends, and nothing may keep the group object, with its threads, alive past that (an error raised and
    # handled on the way included)
    assert [(tmp_path / f"exit{rank}.txt").read_text() for rank in (0, 1)] == ["destroyed, freed, 0 gloo threads"] * 2


def test_more_nccl_ranks_than_gpus_is_a_clear_error(monkeypatch):
    from marlparts.utils import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match=r"LOCAL_RANK=1 has no GPU of its own: this machine has 1 CUDA device"):
        distributed.init_distributed()


def test_auto_backend_follows_the_training_device_not_the_machine(monkeypatch):
    """torchrun with --device cpu on a machine with GPUs trains with gloo, whatever the ranks per GPU."""
    from marlparts.utils import distributed

    chosen = []
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend: chosen.append(backend))
    monkeypatch.setattr(distributed, "rank_and_world_size", lambda: (3, 4))
    distributed.init_distributed(device="cpu")
    assert chosen == ["gloo"]
    with pytest.raises(RuntimeError, match="LOCAL_RANK=3 has no GPU of its own"):
        distributed.init_distributed(device="cuda")


def test_nccl_without_any_gpu_says_so(monkeypatch):
    from marlparts.utils import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(RuntimeError, match="nccl needs CUDA devices and this process sees none"):
        distributed.init_distributed("nccl")


def test_exit_handler_names_what_keeps_the_process_group_alive(monkeypatch):
    """A group still referenced after destroy_process_group() keeps gloo's threads into the interpreter's
    shutdown, where they can abort the process: the exit handler says which default argument holds it."""
    import torch.distributed as dist

    from marlparts.utils import distributed

    handlers, init_process_group = [], dist.init_process_group
    monkeypatch.setenv("WORLD_SIZE", "2")  # one rank in fact, on a store in this process
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend: init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1))
    monkeypatch.setattr(distributed.atexit, "register", lambda handler, *arguments: handlers.append((handler, arguments)))
    distributed.init_distributed("gloo")
    assert dist.is_initialized() and len(handlers) == 1

    def all_reduce_with_the_world_by_default(tensor, group=dist.group.WORLD):  # bound now that the group exists
        return tensor

    handler, arguments = handlers[0]
    with pytest.warns(RuntimeWarning, match=r"the process group outlived destroy_process_group\(\): the default "
                                            r"arguments of .*all_reduce_with_the_world_by_default still hold"):
        handler(*arguments)
    assert not dist.is_initialized()
    del all_reduce_with_the_world_by_default
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handler(*arguments)  # nothing holds the group any more: no warning

"""Checkpoints: a failed load changes nothing, a resumed run ends where an uninterrupted one does,
and a process killed while writing leaves the previous checkpoint loadable.
"""

import csv
import io
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import build_mappo, parameters_vector
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.utils.checkpoint_files import CorruptCheckpointError

HERE = pathlib.Path(__file__).resolve().parent


def spread(num_envs=2):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=num_envs, seed=0)


def test_loading_a_checkpoint_of_other_shapes_names_the_tensor_and_changes_nothing(tmp_path):
    other = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=2), directory=str(tmp_path))  # same agent ids
    path = str(tmp_path / "other.pt")
    other.save(path)
    agent = build_mappo(spread(), directory=str(tmp_path))
    agent.timestep = 5
    before = [parameters_vector(model) for model in agent.distinct_models()]
    with pytest.raises(ValueError, match=r"policy\[agent_0\+agent_1\+agent_2\].*net\.0\.weight.*\(16, 3\).*\(16, 18\)"):
        agent.load(path)
    assert agent.timestep == 5
    assert all(torch.equal(a, parameters_vector(m)) for a, m in zip(before, agent.distinct_models()))


def test_a_load_that_fails_on_a_later_part_leaves_the_earlier_parts_untouched(tmp_path):
    env = spread()
    one_value_per_agent = build_mappo(env, directory=str(tmp_path))
    path = str(tmp_path / "a.pt")
    one_value_per_agent.save(path)
    agent = build_mappo(env, directory=str(tmp_path), cfg={"agent_specific_values": "none"})
    policy_before = parameters_vector(agent.groups[0].models["policy"])
    with pytest.raises(ValueError, match=r"value\[agent_0\+agent_1\+agent_2\].*net\.2\.(weight|bias)"):
        agent.load(path)
    assert torch.equal(policy_before, parameters_vector(agent.groups[0].models["policy"]))


@pytest.mark.parametrize("algorithm", ["mappo", "maddpg"])
def test_a_run_resumed_in_a_fresh_process_ends_like_an_uninterrupted_one(tmp_path, algorithm, example_runner):
    def run(*args):
        done = example_runner.run([HERE / "resume_run.py", algorithm, *args], env=dict(os.environ), timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    run(20, tmp_path / "straight.pt")
    run(10, tmp_path / "first_half.pt", "--save", tmp_path / "checkpoint.pt")
    run(10, tmp_path / "resumed.pt", "--load", tmp_path / "checkpoint.pt")
    straight = torch.load(tmp_path / "straight.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=True)
    halfway = torch.load(tmp_path / "first_half.pt", weights_only=True)
    assert resumed["timestep"] == straight["timestep"] == 20
    assert any(not torch.equal(a, b) for a, b in zip(halfway["parameters"], straight["parameters"]))
    for a, b in zip(straight["parameters"], resumed["parameters"]):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


WRITER = """
import sys, torch
sys.path.insert(0, {here!r})
from helpers import build_mappo
from marlparts.envs import wrap_env
from toy_envs import CountingEnv
agent = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=1), directory={directory!r})
agent.save({path!r})
print("saved", flush=True)
while True:
    for model in agent.distinct_models():
        for p in model.parameters():
            p.data.add_(1.0)
    agent.save({path!r})
"""


def test_a_process_killed_while_writing_a_checkpoint_leaves_the_previous_one_loadable(tmp_path):
    path = str(tmp_path / "agent.pt")
    script = WRITER.format(here=str(HERE), directory=str(tmp_path), path=path)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "saved"
    time.sleep(1.0)  # many saves in flight
    process.send_signal(signal.SIGKILL)
    process.wait()
    agent = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=1), directory=str(tmp_path))
    agent.load(path)
    value = parameters_vector(agent.groups[0].models["policy"])
    assert torch.isfinite(value).all()


def test_a_load_that_fails_late_leaves_the_memory_untouched(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"checkpoint_memory": True}})
    from marlparts.trainers import SequentialTrainer

    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    state = agent.state_dict()
    fresh = build_mappo(env, rollouts=8, directory=str(tmp_path))
    SequentialTrainer(env=env, agents=fresh, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    before = fresh.groups[0].memory.get_tensor_by_name("observations").clone()
    del state["rng"]["python"]
    with pytest.raises(KeyError, match="rng"):
        fresh.load_state_dict(state)
    assert fresh.groups[0].memory.memory_index == 3
    assert torch.equal(fresh.groups[0].memory.get_tensor_by_name("observations"), before)


def counting_agent(tmp_path):
    return build_mappo(wrap_env(lambda: CountingEnv(), num_envs=1), directory=str(tmp_path))


def test_flipped_bytes_in_a_weight_are_an_error_naming_the_file_and_the_tensor(tmp_path):
    agent = counting_agent(tmp_path)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    data = bytearray(path.read_bytes())
    weight = agent.groups[0].models["value"].net[0].weight.detach().numpy().tobytes()
    offset = data.find(weight) + len(weight) // 2  # the middle of the critic's first weight matrix
    assert data.count(weight) == 1
    data[offset: offset + 8] = bytes(b ^ 0xFF for b in data[offset: offset + 8])
    path.write_bytes(bytes(data))
    fresh = counting_agent(tmp_path)
    before = parameters_vector(fresh.groups[0].models["value"])
    with pytest.raises(CorruptCheckpointError, match=rf"{re.escape(str(path))}.*modules\['value\[agent_0\+agent_1\+agent_2\]'\]"
                                                    r"\['net\.0\.weight'\]"):
        fresh.load(str(path))
    assert torch.equal(before, parameters_vector(fresh.groups[0].models["value"]))


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "text"])
def test_a_truncated_or_garbage_checkpoint_is_an_error_naming_the_file(tmp_path, damage):
    agent = counting_agent(tmp_path)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    whole = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": whole[: len(whole) // 2], "garbage": bytes(range(256)) * 40,
                      "text": "step,tag,value\n1,a,0.5\n".encode()}[damage])
    with pytest.raises(CorruptCheckpointError, match=re.escape(str(path))):
        counting_agent(tmp_path).load(str(path))


def test_a_memory_file_is_checked_like_an_agent_checkpoint(tmp_path):
    from marlparts.memories import RandomMemory

    memory = RandomMemory(memory_size=4, num_envs=2)
    memory.create_tensor("rewards", 1)
    memory.add_samples(rewards=torch.arange(2.0).view(2, 1))
    path = tmp_path / "memory.pt"
    memory.save(str(path))
    data = bytearray(path.read_bytes())
    offset = data.find(torch.tensor([0.0, 1.0]).numpy().tobytes())  # the rewards of the two copies
    data[offset + 4] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=rf"{re.escape(str(path))}.*tensors"):
        memory.load(str(path))


def interrupt_at_line(count_from, watched):
    """A trace function that raises ``KeyboardInterrupt`` at the ``count_from``-th line run in a file of ``watched``
    (as a Ctrl-C landing there would); ``state["lines"]`` counts the lines seen.
    """
    state = {"lines": 0}

    def local(frame, event, arg):
        if event == "line":
            state["lines"] += 1
            if state["lines"] == count_from:
                raise KeyboardInterrupt
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename in watched else None

    return calls, state


def test_an_interrupt_anywhere_in_a_save_leaves_no_temporary_file_and_a_whole_checkpoint(tmp_path):
    import tempfile

    import marlparts.utils.files as files

    agent, fresh = counting_agent(tmp_path), counting_agent(tmp_path)
    policy = agent.groups[0].models["policy"]
    path = tmp_path / "checkpoints" / "agent.pt"
    watched = {files.__file__, tempfile.__file__, os.__file__}
    tracer, lines = interrupt_at_line(0, watched)
    sys.settrace(tracer)
    agent.save(str(path))  # counts the lines a save runs
    sys.settrace(None)
    total = lines["lines"]
    on_disk = parameters_vector(policy)
    # every line of the first 60 (opening the file, the first writes), then every 7th through the writes of the tensors
    for line in sorted(set(range(1, 60)) | set(range(60, total + 1, 7)) | {total}):
        for p in policy.parameters():
            p.data.add_(1.0)
        tracer, _ = interrupt_at_line(line, watched)
        sys.settrace(tracer)
        try:
            agent.save(str(path))
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert os.listdir(path.parent) == ["agent.pt"], f"interrupted at line {line}: {os.listdir(path.parent)}"
        fresh.load(str(path))
        loaded = parameters_vector(fresh.groups[0].models["policy"])
        assert torch.equal(loaded, on_disk) or torch.equal(loaded, parameters_vector(policy)), line
        on_disk = loaded
    assert total > 100


FULL_DISK_RUN = """
import os, resource, signal, sys
sys.path.insert(0, {here!r})
from helpers import build_mappo
from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from toy_envs import CountingEnv
env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=1, seed=0)
agent = build_mappo(env, directory={directory!r}, cfg={{"experiment": {{"experiment_name": "run", "tensorboard": False,
                    "write_interval": 1, "checkpoint_interval": 10}}}})
trainer = SequentialTrainer(env=env, agents=agent, cfg={{"timesteps": 10, "disable_progressbar": True}})
trainer.train()
size = os.path.getsize(os.path.join(agent.experiment_dir, "scalars.csv"))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit fails to grow, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1500, size + 1500))
try:
    trainer.train()
except OSError as error:
    print("ERROR", error)
"""


def test_a_file_that_cannot_grow_leaves_whole_csv_rows_the_last_checkpoint_and_an_error_naming_the_file(tmp_path):
    script = FULL_DISK_RUN.format(here=str(HERE), directory=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "run"
    assert re.search(rf"ERROR .*checkpoint {re.escape(str(folder / 'checkpoints' / 'agent_20.pt'))}.*File too large",
                     done.stdout), done.stdout + done.stderr[-3000:]
    assert re.search(rf"CSV logging failed.*{re.escape(str(folder / 'scalars.csv'))}.*File too large", done.stderr), \
        done.stderr[-3000:]
    assert sorted(os.listdir(folder / "checkpoints")) == ["agent_10.pt"]
    counting_agent(tmp_path).load(str(folder / "checkpoints" / "agent_10.pt"))
    text = (folder / "scalars.csv").read_text()
    assert text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text)))
    assert all(len(row) == 3 for row in rows) and max(int(row[0]) for row in rows[1:]) > 10


def test_a_full_disk_is_named_with_the_file_and_its_folder(tmp_path, monkeypatch):
    import errno

    import marlparts.utils.files as files

    agent = counting_agent(tmp_path)
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    before = path.read_bytes()

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "write_all", full)
    with pytest.raises(OSError, match=rf"{re.escape(str(path))}.*the disk holding {re.escape(str(tmp_path))} is full"):
        agent.save(str(path))
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["agent.pt"]

import pytest
import torch

from marlparts.memories import RandomMemory


def filled_memory():
    memory = RandomMemory(memory_size=4, num_envs=3)
    memory.create_tensor("x", (2, 1))
    for t in range(4):
        memory.add_samples(x=(torch.arange(6, dtype=torch.float32) + 6 * t).reshape(3, 2, 1))
    return memory


def test_sample_all_uses_every_sample_once_per_call_and_shuffles():
    memory = filled_memory()
    seen_orders = []
    for _ in range(2):
        batches = memory.sample_all(["x"], mini_batches=3)
        assert len(batches) == 3
        values = torch.cat([b[0] for b in batches]).flatten()
        assert sorted(values.tolist()) == list(range(24))
        seen_orders.append(values.tolist())
        # the agent axis stays together within a sample
        stacked = torch.cat([b[0] for b in batches])
        assert torch.all(stacked[:, 1] - stacked[:, 0] == 1)
    assert seen_orders[0] != seen_orders[1]


def test_wrapping_and_len():
    memory = RandomMemory(memory_size=2, num_envs=1)
    memory.create_tensor("x", 1)
    assert len(memory) == 0
    for value in range(3):
        memory.add_samples(x=torch.tensor([[float(value)]]))
    assert len(memory) == 2 and memory.filled
    assert memory.get_tensor_by_name("x").flatten().tolist() == [2.0, 1.0]


def test_sample_draws_from_stored_samples():
    memory = filled_memory()
    (x,) = memory.sample(["x"], batch_size=50)
    assert x.shape == (50, 2, 1) and x.min() >= 0 and x.max() <= 23


def test_bad_sample_shape_and_unknown_name_are_clear():
    memory = filled_memory()
    with pytest.raises(ValueError, match=r"'x'.*\(3, 2, 1\).*\(3, 1\)"):
        memory.add_samples(x=torch.zeros(3, 1))
    with pytest.raises(KeyError, match="'y'"):
        memory.get_tensor_by_name("y")


def test_save_and_load(tmp_path):
    memory = filled_memory()
    memory.save(str(tmp_path / "memory.pt"))
    other = RandomMemory(memory_size=4, num_envs=3)
    other.load(str(tmp_path / "memory.pt"))
    assert torch.equal(other.get_tensor_by_name("x"), memory.get_tensor_by_name("x")) and other.filled


def test_a_tensor_held_in_bytes_is_read_as_floats_everywhere_and_saved_as_bytes(tmp_path):
    memory = RandomMemory(memory_size=4, num_envs=3)
    storage = memory.create_tensor("observations", (2, 5), storage_dtype=torch.uint8)
    assert storage.dtype == torch.uint8 and storage.element_size() * storage[0, 0].numel() == 10  # bytes per sample
    steps = [torch.randint(0, 256, (3, 2, 5)).float() for _ in range(4)]
    for step in steps:
        memory.add_samples(observations=step)
    expected = torch.stack(steps)
    whole = memory.get_tensor_by_name("observations")
    assert whole.dtype == torch.float32 and torch.equal(whole, expected)
    indexes = torch.tensor([0, 5, 11])
    (sampled,) = memory.sample_by_index(["observations"], indexes)
    assert sampled.dtype == torch.float32 and torch.equal(sampled, expected.flatten(0, 1)[indexes])
    (chunks,) = memory.chunks_by_index(["observations"], torch.tensor([1]), 2)
    assert chunks.dtype == torch.float32 and torch.equal(chunks[0], expected[:2, 1])
    memory.save(str(tmp_path / "memory.pt"))
    fresh = RandomMemory(memory_size=4, num_envs=3)
    fresh.create_tensor("observations", (2, 5), storage_dtype=torch.uint8)
    fresh.load(str(tmp_path / "memory.pt"))
    assert fresh.tensors["observations"].dtype == torch.uint8
    assert torch.equal(fresh.get_tensor_by_name("observations"), expected)
    with pytest.raises(ValueError, match="read as"):
        fresh.create_tensor("observations", (2, 5))  # the same name as float32 storage: refused, naming both
    loaded_first = RandomMemory(memory_size=4, num_envs=3)  # loaded before its algorithm creates the tensor
    loaded_first.load(str(tmp_path / "memory.pt"))
    loaded_first.create_tensor("observations", (2, 5), storage_dtype=torch.uint8)
    assert torch.equal(loaded_first.get_tensor_by_name("observations"), expected)


@pytest.mark.parametrize("bad_value", [0.6, -1.0, 256.0, float("nan")])
def test_a_tensor_held_in_bytes_refuses_a_sample_it_cannot_hold_exactly_and_writes_nothing(bad_value):
    """A value that bytes cannot hold (a fraction, a negative, over 255, NaN) is not wrapped or truncated into
    the rollout: the step is refused, naming the tensor, the copy and the place, and nothing of it is written."""
    memory = RandomMemory(memory_size=4, num_envs=2)
    memory.create_tensor("observations", (2, 3), storage_dtype=torch.uint8)
    memory.create_tensor("rewards", (2, 1))
    good = torch.randint(0, 256, (2, 2, 3)).float()
    memory.add_samples(observations=good, rewards=torch.ones(2, 2, 1))
    bad = good.clone()
    bad[1, 0, 2] = bad_value
    with pytest.raises(ValueError, match=r"'observations'.*torch\.uint8.*env copy 1.*\(0, 2\)"):
        memory.add_samples(rewards=torch.full((2, 2, 1), 7.0), observations=bad)
    assert memory.memory_index == 1 and len(memory) == 2
    assert torch.equal(memory.get_tensor_by_name("observations")[0], good)
    assert not (memory.get_tensor_by_name("rewards") == 7.0).any()  # the step's other tensors are not written either

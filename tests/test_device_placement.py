"""Where models and memories live when the algorithm computes on another device than the CPU.

Runs without a GPU: PyTorch's ``meta`` device (shapes, no data) stands in for a second device,
so the placement rules are checked on every machine; ``test_cuda.py`` trains on a real GPU.
"""

import gymnasium
import numpy as np
import pytest
import torch
from helpers import Policy, Value

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.memories import RandomMemory

UIDS = ["agent_0", "agent_1"]
OBSERVATION = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTION = gymnasium.spaces.Discrete(2)
STATE = gymnasium.spaces.Box(-np.inf, np.inf, (6,), np.float32)


def build(memories, device="meta", uids=UIDS):
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 4
    policy = Policy(observation_space=OBSERVATION, action_space=ACTION)  # made on the CPU, as users do
    value = Value(observation_space=STATE, output_size=len(uids))
    return MAPPO(possible_agents=uids, models={uid: {"policy": policy, "value": value} for uid in uids},
                 memories=memories, observation_spaces={uid: OBSERVATION for uid in uids},
                 action_spaces={uid: ACTION for uid in uids}, state_spaces={uid: STATE for uid in uids},
                 device=device, cfg=cfg)


def test_a_model_moved_to_another_device_says_where_it_is():
    model = Policy(observation_space=OBSERVATION, action_space=ACTION)
    assert model.device == torch.device("cpu")
    model.to("meta")
    assert model.device == torch.device("meta")
    # the input-size check builds its sample batch on the model's device
    model.check_input_size(expected=3, what="policy", outputs=2)


def test_a_memory_made_without_a_device_follows_the_algorithm():
    memories = {uid: RandomMemory(memory_size=4, num_envs=2) for uid in UIDS}
    agent = build(memories)
    assert all(parameter.device.type == "meta" for model in agent.distinct_models() for parameter in model.parameters())
    for uid in UIDS:
        assert memories[uid].device == torch.device("meta"), uid
    memories["agent_0"].create_tensor("rewards", 1)
    assert memories["agent_0"].get_tensor_by_name("rewards").device.type == "meta"


def test_a_memory_made_for_another_device_is_a_clear_error():
    memories = {uid: RandomMemory(memory_size=4, num_envs=2, device="cpu") for uid in UIDS}
    with pytest.raises(ValueError, match=r"memories\['agent_0'\] is on cpu .* but the algorithm computes on meta"):
        build(memories)


def test_cuda_and_cuda_0_are_the_same_device_for_a_memory():
    memory = RandomMemory(memory_size=4, num_envs=2, device="cuda:0")
    memory.use_device("cuda", owner="memories['agent_0']")  # no tensor yet: nothing touches the GPU
    assert memory.device == torch.device("cuda")


@pytest.mark.filterwarnings("ignore:.*to a meta parameter")  # copying into meta tensors is a no-op
def test_a_checkpoint_loads_into_an_algorithm_on_another_device(tmp_path):
    """Generator states stay on the CPU; every other part copies into the algorithm's own tensors."""
    cpu_agent = build({uid: RandomMemory(memory_size=4, num_envs=2) for uid in UIDS}, device="cpu")
    path = str(tmp_path / "agent.pt")
    cpu_agent.save(path)
    agent = build({uid: RandomMemory(memory_size=4, num_envs=2) for uid in UIDS})
    agent.load(path)
    assert all(parameter.device.type == "meta" for model in agent.distinct_models() for parameter in model.parameters())


def test_a_memory_used_by_an_algorithm_on_another_device_is_a_clear_error():
    memories = {uid: RandomMemory(memory_size=4, num_envs=2) for uid in UIDS}
    build(memories)  # the memories follow this algorithm to meta and stay bound there
    with pytest.raises(ValueError, match=r"memories\['agent_0'\] is on meta .* but the algorithm computes on cpu"):
        build(memories, device="cpu")
    assert all(memory.device == torch.device("meta") for memory in memories.values())


def test_a_rejected_memory_leaves_the_others_where_they_were():
    memories = {"agent_0": RandomMemory(memory_size=4, num_envs=2),
                "agent_1": RandomMemory(memory_size=4, num_envs=2, device="cpu")}
    memories["agent_0"].create_tensor("rewards", 1)
    with pytest.raises(ValueError, match=r"memories\['agent_1'\]"):
        build(memories)
    assert memories["agent_0"].device == torch.device("cpu")
    assert memories["agent_0"].get_tensor_by_name("rewards").device.type == "cpu"


def test_an_env_on_another_device_than_the_algorithm_is_a_clear_error():
    from toy_envs import CountingEnv

    from marlparts.envs import wrap_env
    from marlparts.trainers import SequentialTrainer

    env = wrap_env(lambda: CountingEnv(), num_envs=2)  # tensors on the CPU
    agent = build({uid: RandomMemory(memory_size=4, num_envs=2) for uid in env.possible_agents},
                  uids=env.possible_agents)
    with pytest.raises(ValueError, match=r"the env returns tensors on cpu but MAPPO .* computes on meta: wrap the env "
                                         r"with device=.meta. .*or build the algorithm with device=env.device"):
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1})


def test_a_scaler_moved_after_use_standardises_with_its_moved_statistics():
    from marlparts.resources import RunningStandardScaler

    scaler = RunningStandardScaler(3)
    scaler.update(torch.randn(10, 3))
    scaler(torch.zeros(2, 3))  # caches mean and std on the CPU
    scaler.to("meta")
    assert scaler(torch.zeros(2, 3, device="meta")).device.type == "meta"

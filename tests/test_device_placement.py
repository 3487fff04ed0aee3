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


def build(memories, device="meta"):
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 4
    policy = Policy(observation_space=OBSERVATION, action_space=ACTION)  # made on the CPU, as users do
    value = Value(observation_space=STATE, output_size=2)
    return MAPPO(possible_agents=UIDS, models={uid: {"policy": policy, "value": value} for uid in UIDS},
                 memories=memories, observation_spaces={uid: OBSERVATION for uid in UIDS},
                 action_spaces={uid: ACTION for uid in UIDS}, state_spaces={uid: STATE for uid in UIDS},
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
    with pytest.raises(ValueError, match=r"memories\['agent_0'\] was made with device=cpu but the algorithm computes on meta"):
        build(memories)


def test_cuda_and_cuda_0_are_the_same_device_for_a_memory():
    memory = RandomMemory(memory_size=4, num_envs=2, device="cuda:0")
    memory.use_device("cuda", owner="memories['agent_0']")  # no tensor yet: nothing touches the GPU
    assert memory.device == torch.device("cuda")

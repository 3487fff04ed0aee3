"""Graph and set networks over the agents of each env copy: what they read, how algorithms bind them, and
checkpoints that move between agent counts."""

import gymnasium
import numpy as np
import pytest
import torch
from helpers import Policy, Value

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG, MADDPG, MADDPG_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.memories import RandomMemory
from marlparts.models import AgentGraph, CategoricalMixin, DeepSets, DeterministicMixin, Model, mlp
from marlparts.resources import PopArt
from marlparts.utils.config import merge_config

OBSERVATION = gymnasium.spaces.Box(-1.0, 1.0, shape=(5,), dtype=np.float32)
ACTIONS = gymnasium.spaces.Discrete(3)


def set_network(kind, inputs, outputs, output_gain=1.0):
    if kind == "gnn":
        pytest.importorskip("torch_geometric")
        return AgentGraph(inputs, outputs, hidden_size=16, position_features=(0, 2), output_gain=output_gain)
    return DeepSets(inputs, outputs, hidden_size=16, output_gain=output_gain)


class SetPolicy(CategoricalMixin, Model):
    def __init__(self, *, kind="gnn", **kwargs):
        super().__init__(**kwargs)
        self.net = set_network(kind, self.num_observations, self.num_actions, output_gain=0.01)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class SetValue(DeterministicMixin, Model):
    def __init__(self, *, kind="gnn", shift=0.0, **kwargs):
        super().__init__(**kwargs)
        self.net = set_network(kind, self.num_observations, self.num_outputs)
        self.shift = shift

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]) + self.shift, {}


class MlpValue(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(16,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def build_ippo(agents, *, kind="gnn", models=None, cfg=None, num_envs=4, algorithm=IPPO):
    uids = [f"agent_{k}" for k in range(agents)]
    if models is None:
        shared = {"policy": SetPolicy(kind=kind, observation_space=OBSERVATION, action_space=ACTIONS),
                  "value": SetValue(kind=kind, observation_space=OBSERVATION)}
        models = {uid: shared for uid in uids}
    defaults = IPPO_DEFAULT_CONFIG if algorithm is IPPO else MAPPO_DEFAULT_CONFIG
    config = merge_config(defaults.copy(), {"rollouts": 4, **(cfg or {})})
    extra = {"state_spaces": {uid: OBSERVATION for uid in uids}} if algorithm is MAPPO else {}
    return algorithm(possible_agents=uids, models=models,
                     memories={uid: RandomMemory(memory_size=4, num_envs=num_envs) for uid in uids},
                     observation_spaces={uid: OBSERVATION for uid in uids},
                     action_spaces={uid: ACTIONS for uid in uids}, cfg=config, **extra)


@pytest.mark.parametrize("kind", ["gnn", "deepsets"])
def test_each_agent_s_output_follows_its_own_row_under_a_permutation_of_the_agents(kind):
    torch.manual_seed(0)
    network = set_network(kind, 5, 3)
    network.agents_per_copy = 4
    rows = torch.randn(2 * 4, 5)
    order = torch.tensor([2, 0, 3, 1])
    permuted = rows.unflatten(0, (2, 4))[:, order].flatten(0, 1)
    outputs = network(rows).unflatten(0, (2, 4))
    assert torch.allclose(network(permuted).unflatten(0, (2, 4)), outputs[:, order], atol=1e-5)


@pytest.mark.parametrize("kind", ["gnn", "deepsets"])
def test_an_agent_reads_the_other_agents_of_its_copy_and_never_another_copy(kind):
    torch.manual_seed(0)
    network = set_network(kind, 5, 3)
    network.agents_per_copy = 3
    rows = torch.randn(2 * 3, 5)
    changed = rows.clone()
    changed[1] += 1.0  # agent 1 of copy 0
    before, after = network(rows), network(changed)
    assert not torch.allclose(after[0], before[0]), "agent 0 reads agent 1 of its copy"
    assert torch.equal(after[3:], before[3:]), "copy 1 reads nothing of copy 0"


@pytest.mark.parametrize("kind", ["gnn", "deepsets"])
def test_the_same_parameters_run_on_any_number_of_agents(kind):
    network = set_network(kind, 5, 3)
    for agents in (1, 2, 7):
        network.agents_per_copy = agents
        assert network(torch.randn(3 * agents, 5)).shape == (3 * agents, 3)


def test_a_set_layer_that_does_not_know_its_agents_or_gets_part_of_a_copy_says_so():
    network = DeepSets(5, 3)
    with pytest.raises(ValueError, match="does not know how many agents a copy has"):
        network(torch.randn(4, 5))
    network.agents_per_copy = 3
    with pytest.raises(ValueError, match=r"3 agents a copy, got input of shape \(4, 5\)"):
        network(torch.randn(4, 5))


def test_the_graph_connects_every_pair_of_agents_of_a_copy_and_checks_its_position_columns():
    pytest.importorskip("torch_geometric")
    torch.manual_seed(0)
    network = AgentGraph(5, 2, hidden_size=16, position_features=(0, 2))
    network.agents_per_copy = 3
    edges = network.edge_index(2, 3, torch.device("cpu"))
    assert sorted(map(tuple, edges.T.tolist())) == sorted(
        (first + i, first + j) for first in (0, 3) for i in range(3) for j in range(3) if i != j)
    with pytest.raises(ValueError, match=r"position_features must be \(start, stop\) columns within the 5"):
        AgentGraph(5, 2, position_features=(4, 7))


@pytest.mark.parametrize("kind", ["gnn", "deepsets"])
def test_ippo_binds_policy_and_critic_to_the_group_size_and_checks_them_on_whole_copies(kind):
    agent = build_ippo(3, kind=kind)  # the shape check runs on 3 rows here: 2 would not fill a copy
    group = agent.groups[0]
    assert [layer.agents_per_copy for role in ("policy", "value") for layer in group.models[role].modules()
            if hasattr(layer, "agents_per_copy")] == [3, 3]
    observations = {uid: torch.randn(4, 5) for uid in agent.possible_agents}
    actions = agent.act(observations, None, {}, 0, 1)
    assert set(actions) == set(agent.possible_agents) and actions["agent_0"].shape == (4, 1)


def test_popart_s_output_layer_check_runs_on_a_set_critic():
    uids = ["agent_0", "agent_1", "agent_2"]
    shared = {"policy": SetPolicy(kind="deepsets", observation_space=OBSERVATION, action_space=ACTIONS),
              "value": SetValue(kind="deepsets", shift=1.0, observation_space=OBSERVATION)}
    with pytest.raises(ValueError, match="PopArt keeps the values"):
        build_ippo(3, models={uid: shared for uid in uids}, cfg={"value_preprocessor": PopArt})


def test_a_set_layer_where_the_algorithm_does_not_feed_one_row_per_agent_is_refused():
    uids = ["agent_0", "agent_1"]
    shared = {"policy": SetPolicy(observation_space=OBSERVATION, action_space=ACTIONS),
              "value": SetValue(observation_space=OBSERVATION, output_size=2)}
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['value'\].*MAPPO gives such a layer one row per "
                                         r"agent in only its \['policy'\] models"):
        build_ippo(2, models={uid: shared for uid in uids}, algorithm=MAPPO)
    policy = SetPolicy(observation_space=gymnasium.spaces.Box(-1, 1, (5,)), action_space=gymnasium.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="MADDPG gives such a layer one row per agent in none of its models"):
        MADDPG(possible_agents=uids, models={uid: {"policy": policy, "critic": MlpValue(observation_space=OBSERVATION)}
                                             for uid in uids},
               memories={uid: RandomMemory(memory_size=8, num_envs=1) for uid in uids},
               observation_spaces={uid: OBSERVATION for uid in uids},
               action_spaces={uid: gymnasium.spaces.Box(-1, 1, (2,)) for uid in uids},
               state_spaces={uid: OBSERVATION for uid in uids}, cfg=MADDPG_DEFAULT_CONFIG.copy())


def test_a_set_model_shared_by_agents_that_do_not_share_every_model_is_refused():
    uids = ["agent_0", "agent_1"]
    policy = SetPolicy(observation_space=OBSERVATION, action_space=ACTIONS)
    models = {uid: {"policy": policy, "value": MlpValue(observation_space=OBSERVATION)} for uid in uids}
    with pytest.raises(ValueError, match=r"one instance must be shared by the agents it reads: it is used by "
                                         r"\['agent_0'\] and \['agent_1'\]"):
        build_ippo(2, models=models)


def test_a_checkpoint_of_shared_set_models_loads_into_a_run_with_more_agents():
    torch.manual_seed(0)
    trained, larger = build_ippo(3), build_ippo(5)
    larger.load_state_dict(trained.state_dict())
    for role in ("policy", "value"):
        for mine, theirs in zip(larger.groups[0].models[role].parameters(), trained.groups[0].models[role].parameters()):
            assert torch.equal(mine, theirs)
    actions = larger.act({uid: torch.randn(4, 5) for uid in larger.possible_agents}, None, {}, 0, 1)
    assert len(actions) == 5


@pytest.mark.parametrize("stack_models", [True, False])
def test_a_checkpoint_of_agents_with_models_of_their_own_does_not_load_into_shared_models(stack_models):
    uids = ["agent_0", "agent_1", "agent_2"]
    own = {uid: {"policy": Policy(observation_space=OBSERVATION, action_space=ACTIONS),
                 "value": Value(observation_space=OBSERVATION)} for uid in uids}
    state = build_ippo(3, models=own, cfg={"stack_models": stack_models}).state_dict()
    shared = {"policy": Policy(observation_space=OBSERVATION, action_space=ACTIONS),
              "value": Value(observation_space=OBSERVATION)}
    with pytest.raises(KeyError, match="checkpoint does not match this IPPO"):
        build_ippo(3, models={uid: shared for uid in uids}).load_state_dict(state)


def test_a_layer_serves_one_agent_count_so_a_second_algorithm_of_another_count_is_refused_and_changes_nothing():
    six = build_ippo(6, kind="deepsets")
    shared = six.groups[0].models
    with pytest.raises(ValueError, match="already reads copies of 6 agents .* not 8: a layer serves one agent count"):
        build_ippo(8, models={f"agent_{k}": shared for k in range(8)})
    assert all(layer.agents_per_copy == 6 for model in shared.values() for layer in model.modules()
               if hasattr(layer, "agents_per_copy"))
    build_ippo(6, models={f"agent_{k}": shared for k in range(6)})  # the same count again is fine


def test_one_layer_inside_the_models_of_two_groups_of_different_sizes_is_refused_before_any_is_set():
    layer = DeepSets(5, 3, hidden_size=8)

    class Wrapped(CategoricalMixin, Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = layer

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    first = {"policy": Wrapped(observation_space=OBSERVATION, action_space=ACTIONS),
             "value": MlpValue(observation_space=OBSERVATION)}
    second = {"policy": Wrapped(observation_space=OBSERVATION, action_space=ACTIONS),
              "value": MlpValue(observation_space=OBSERVATION)}
    models = {"agent_0": first, "agent_1": first, "agent_2": first, "agent_3": second, "agent_4": second}
    # two models over one layer are refused as such (each would step it with its own optimizer)
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\] and models\['agent_3'\]\['policy'\] .*share"):
        build_ippo(5, models=models)
    assert layer.agents_per_copy is None


def test_a_checkpoint_of_another_agent_count_gives_its_models_but_neither_its_counters_nor_its_folder(tmp_path):
    trained = build_ippo(3, cfg={"experiment": {"directory": str(tmp_path), "experiment_name": "three"}})
    trained.init()
    trained.timestep, trained.best_return = 4096, 7.5
    path = tmp_path / "three.pt"
    trained.save(str(path))
    larger = build_ippo(5, cfg={"experiment": {"directory": str(tmp_path), "experiment_name": ""}})
    larger.load(str(path))  # before the run starts, as an example's --checkpoint
    assert (larger.timestep, larger.best_return) == (0, -float("inf"))
    larger.init()
    assert larger.experiment_dir != trained.experiment_dir
    same = build_ippo(3, cfg={"experiment": {"directory": str(tmp_path), "experiment_name": ""}})
    same.load(str(path))  # the same agents: the run goes on, in the checkpoint's folder
    assert same.timestep == 4096 and same.experiment_dir == trained.experiment_dir


def test_a_checkpoint_of_other_agent_ids_does_not_load_into_shared_models():
    red = build_ippo(3)
    state = red.state_dict()
    state["modules"] = {name.replace("agent_", "red_"): part for name, part in state["modules"].items()}
    with pytest.raises(KeyError, match="checkpoint does not match this IPPO"):
        build_ippo(3).load_state_dict(state)


def test_a_truncated_agent_s_final_value_reads_the_others_as_they_are_not_the_env_s_zero_rows():
    from helpers import build_mappo
    from toy_envs import CountingEnv

    from marlparts.envs import wrap_env

    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=1, leave_by="truncated"), num_envs=2, seed=0)
    agent = build_mappo(env, algorithm="ippo")
    agent.init()
    read = []
    original = agent.final_values
    agent.final_values = lambda group, observations, states: read.append(observations.clone()) or original(
        group, observations, states)
    observations, infos = env.reset()
    actions = agent.act(observations, None, infos, 0, 10)
    next_observations, rewards, terminated, truncated, infos = env.step(actions)
    assert bool(truncated["agent_1"].all()) and not bool(truncated["agent_0"].any())
    agent.record_transition(observations=observations, states=None, actions=actions, rewards=rewards,
                            next_observations=next_observations, next_states=None, terminated=terminated,
                            truncated=truncated, infos=infos, timestep=0, timesteps=10)
    (rows,) = read
    assert torch.equal(rows[:, 1], infos["final_observation"]["agent_1"])
    assert torch.equal(rows[:, 0], next_observations["agent_0"]) and torch.equal(rows[:, 2], next_observations["agent_2"])
    assert next_observations["agent_0"].abs().sum() > 0
    env.close()


def test_an_edge_list_made_under_inference_mode_does_not_serve_training():
    pytest.importorskip("torch_geometric")
    network = AgentGraph(5, 2, hidden_size=8, position_features=(0, 2))
    network.agents_per_copy = 3
    rows = torch.randn(6, 5)
    with torch.inference_mode():
        network(rows)
    network(rows).sum().backward()
    assert all(parameter.grad is not None for parameter in network.encoder.parameters())

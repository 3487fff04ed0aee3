"""Configuration: per-agent values resolved and checked at construction, free-form keyword dicts."""

import pytest
from helpers import Policy, Value, build_mappo
from mpe2 import simple_spread_v3

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.trainers import SequentialTrainer
from marlparts.utils.config import merge_config


def spread(num_envs=2):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=num_envs, seed=0)


@pytest.mark.parametrize("key,values", [("discount_factor", (0.9, 0.95, 0.99)), ("value_clip", (0.1, 0.2, 0.3)),
                                        ("gae_lambda", (0.9, 0.95, 1.0)), ("ratio_clip", (0.1, 0.2, 0.3))])
def test_per_agent_values_train_for_every_key_that_allows_them(tmp_path, key, values):
    env = spread()
    per_agent = dict(zip(env.possible_agents, values))
    agent = build_mappo(env, share=False, rollouts=4, directory=str(tmp_path), cfg={key: per_agent})
    assert [group.cfg[key] for group in agent.groups] == list(values)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True}).train()


def test_per_agent_values_must_agree_within_a_group(tmp_path):
    per_agent = {"agent_0": 0.9, "agent_1": 0.95, "agent_2": 0.9}
    with pytest.raises(ValueError, match=r"discount_factor.*differs within the group.*agent_0.*agent_1"):
        build_mappo(spread(), share=True, directory=str(tmp_path), cfg={"discount_factor": per_agent})


def test_a_misspelled_agent_id_in_a_per_agent_value_is_named(tmp_path):
    per_agent = {"agent_0": 0.01, "agent_1": 0.01, "agnet_2": 0.01}
    with pytest.raises(KeyError, match=r"entropy_loss_scale.*'agnet_2'.*agent_2"):
        build_mappo(spread(), share=False, directory=str(tmp_path), cfg={"entropy_loss_scale": per_agent})


def test_a_per_agent_value_for_a_key_that_has_one_value_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"'rollouts'.*one value for every agent"):
        build_mappo(spread(), directory=str(tmp_path), cfg={"rollouts": {"agent_0": 4, "agent_1": 4, "agent_2": 4}})


@pytest.mark.parametrize("key,value,words", [("learning_rate", "3e-4", r"'learning_rate'.*number.*'3e-4'"),
                                             ("learning_epochs", 2.5, r"'learning_epochs'.*int.*2.5"),
                                             ("clip_predicted_values", 1, r"'clip_predicted_values'.*bool"),
                                             ("discount_factor", {"agent_0": "0.9", "agent_1": 0.9, "agent_2": 0.9},
                                              r"'discount_factor'.*agent_0.*number.*'0.9'")])
def test_values_of_the_wrong_type_are_named_at_construction(tmp_path, key, value, words):
    with pytest.raises(TypeError, match=words):
        build_mappo(spread(), share=False, directory=str(tmp_path), cfg={key: value})


def test_keyword_argument_dicts_are_replaced_not_merged():
    defaults = {"noise_kwargs": {"std": 0.1}, "experiment": {"directory": "runs", "wandb_kwargs": {}}}
    merged = merge_config(defaults, {"noise_kwargs": {"theta": 0.2}, "experiment": {"wandb_kwargs": {"project": "p"}}})
    assert merged["noise_kwargs"] == {"theta": 0.2}
    assert merged["experiment"] == {"directory": "runs", "wandb_kwargs": {"project": "p"}}
    assert merge_config(defaults, {"noise_kwargs": {}})["noise_kwargs"] == {}


def test_one_memory_given_to_several_groups_is_an_error():
    env = spread()
    shared_memory = RandomMemory(memory_size=4, num_envs=2)
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.state_space, output_size=3)} for uid in env.possible_agents}
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 4
    with pytest.raises(ValueError, match=r"memories.*agent_0.*agent_1.*same Memory"):
        MAPPO(possible_agents=env.possible_agents, models=models,
              memories={uid: shared_memory for uid in env.possible_agents},
              observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
              state_spaces=env.state_spaces, cfg=cfg)


def test_agents_that_share_models_with_other_spaces_are_named():
    from helpers import box

    env = spread()
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    value = Value(observation_space=env.state_space, output_size=3)
    spaces = dict(env.observation_spaces, agent_1=box(17))
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 4
    with pytest.raises(ValueError, match=r"'agent_0' and 'agent_1' share models but their observation spaces differ"):
        MAPPO(possible_agents=env.possible_agents, models={u: {"policy": policy, "value": value} for u in env.possible_agents},
              memories={u: RandomMemory(memory_size=4, num_envs=2) for u in env.possible_agents},
              observation_spaces=spaces, action_spaces=env.action_spaces, state_spaces=env.state_spaces, cfg=cfg)

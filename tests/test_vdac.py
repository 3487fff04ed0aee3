"""VDAC: the agents' critics summed (or mixed) into the team value, every policy on the team's advantage."""

import pytest
import torch
from helpers import Policy, Value
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.agents import VDAC, VDAC_DEFAULT_CONFIG, VDACMix
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import QMixer
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

GAMMA, LAMBDA = 0.9, 0.8


class AdvantagesOnly(VDAC):
    """Computes the advantages at each update but trains nothing, so the critics stay those of collection."""

    def update(self, timestep, timesteps):
        self.compute_advantages()


def spread_env(max_cycles=25, copies=2):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=max_cycles), num_envs=copies, seed=0)


def build(env, directory, *, algorithm=VDAC, models=None, cfg=None):
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    models = models or {u: {"policy": policy, "value": value} for u in env.possible_agents}
    config = VDAC_DEFAULT_CONFIG.copy()
    config.update({"rollouts": 5, "learning_epochs": 1, "mini_batches": 1, "discount_factor": GAMMA,
                   "gae_lambda": LAMBDA, **(cfg or {})})
    config["experiment"]["directory"] = directory
    memories = {u: RandomMemory(memory_size=config["rollouts"], num_envs=env.num_envs) for u in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces, device=env.device, cfg=config)


def test_the_advantage_is_the_gae_of_the_summed_values_on_the_summed_rewards_for_every_agent(tmp_path):
    set_seed(0)
    env = spread_env(max_cycles=3)  # the episodes end (truncated) at the third step of the five-step rollout
    agent = build(env, str(tmp_path), algorithm=AdvantagesOnly)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    critic = agent.groups[0].models["value"].net
    rewards = memory.get_tensor_by_name("rewards").sum(2).squeeze(-1)            # (T, E): summed over the agents
    values = memory.get_tensor_by_name("values").sum(2).squeeze(-1)              # V_tot = sum of the V_i
    finals = memory.get_tensor_by_name("final_values").sum(2).squeeze(-1)
    truncated = memory.get_tensor_by_name("truncated")[:, :, 0, 0]
    assert truncated[2].all() and not truncated[[0, 1, 3]].any()
    with torch.no_grad():
        last = sum(critic(agent._next_observations[uid]) for uid in env.possible_agents).squeeze(-1)
    by_hand = torch.zeros_like(values)
    running = torch.zeros_like(last)
    for t in reversed(range(5)):
        following = finals[t] if truncated[t].all() else (values[t + 1] if t < 4 else last)
        delta = rewards[t] + GAMMA * following - values[t]
        running = delta + (0.0 if truncated[t].all() else GAMMA * LAMBDA) * running
        by_hand[t] = running
    normalised = (by_hand - by_hand.mean()) / (by_hand.std() + 1e-8)
    for stored_name, expected in (("advantages", normalised), ("returns", by_hand + values),
                                  ("old_values", values)):
        stored = memory.get_tensor_by_name(stored_name).squeeze(-1)              # (T, E, agents)
        for agent_index in range(3):
            assert torch.allclose(stored[:, :, agent_index], expected, atol=1e-5), (stored_name, agent_index)


def test_the_value_loss_is_that_of_the_team_value_and_reaches_every_critic(tmp_path):
    set_seed(1)
    env = spread_env()
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.observation_space(uid))} for uid in env.possible_agents}
    agent = build(env, str(tmp_path), algorithm=AdvantagesOnly, models=models,
                  cfg={"clip_predicted_values": False, "stack_models": False})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    indexes = torch.arange(10)
    losses = agent.minibatch_losses(indexes)
    memory = agent.groups[0].memory
    targets = memory.get_tensor_by_name("value_targets", keepdim=False)[:, 0, 0]
    team = sum(group.models["value"].net(group.memory.get_tensor_by_name("observations", keepdim=False)[:, 0])
               for group in agent.groups).squeeze(-1)
    assert torch.allclose(losses["value"], (team - targets).square().mean(), atol=1e-5)
    losses["value"].backward()
    for group in agent.groups:
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in group.models["value"].parameters()), group.uids


def test_the_mixer_reads_the_agents_values_in_agent_order_whatever_the_groups(tmp_path):
    env = spread_env()
    uid = env.possible_agents[0]
    shared = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    own = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    mixer = QMixer(state_space=env.state_space, num_agents=3)
    models = {"agent_0": {"policy": shared, "value": value, "mixer": mixer},
              "agent_1": {"policy": own, "value": value, "mixer": mixer},
              "agent_2": {"policy": shared, "value": value, "mixer": mixer}}
    agent = build(env, str(tmp_path), algorithm=VDACMix, models=models)
    assert [group.uids for group in agent.groups] == [["agent_0", "agent_2"], ["agent_1"]]
    joined = agent.joint([torch.tensor([[[0.0], [2.0]]]), torch.tensor([[[1.0]]])])
    assert joined.tolist() == [[0.0, 1.0, 2.0]]
    states = torch.randn(4, env.state_space.shape[0])
    values = torch.randn(4, 3)
    with torch.no_grad():
        expected, _, _ = mixer.act({"observations": states, "agent_values": values}, role="mixer")
        assert torch.allclose(agent.mix(values, states), expected)


def test_vdac_mix_trains_and_checkpoints_its_mixer(tmp_path):
    set_seed(2)
    env = spread_env(max_cycles=3)
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    mixer = QMixer(state_space=env.state_space, num_agents=3)
    agent = build(env, str(tmp_path), algorithm=VDACMix,
                  models={u: {"policy": policy, "value": value, "mixer": mixer} for u in env.possible_agents})
    before = [p.detach().clone() for p in mixer.parameters()]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 10, "disable_progressbar": True}).train()
    assert any(not torch.equal(b, p) for b, p in zip(before, mixer.parameters()))
    memory = agent.groups[0].memory
    truncated = memory.get_tensor_by_name("truncated")[:, :, 0, 0]
    final_states = memory.get_tensor_by_name("final_states")
    assert truncated.any() and (final_states[truncated].abs().sum(-1) > 0).all()  # the states its mixer bootstraps from
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    assert any(key.startswith("mixer[") for key in torch.load(path, weights_only=True)["modules"])
    fresh_mixer = QMixer(state_space=env.state_space, num_agents=3)
    fresh_policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    fresh_value = Value(observation_space=env.observation_space(uid))
    fresh = build(env, str(tmp_path), algorithm=VDACMix, models={
        u: {"policy": fresh_policy, "value": fresh_value, "mixer": fresh_mixer} for u in env.possible_agents})
    fresh.load(str(path))
    assert all(torch.equal(a, b) for a, b in zip(mixer.parameters(), fresh_mixer.parameters()))


@pytest.mark.parametrize("cfg,words", [
    ({"value_preprocessor": torch.nn.Identity}, r"value_preprocessor.*None"),
    ({"team_reward": "max"}, r"team_reward.*'max'"),
    ({"discount_factor": {"agent_0": 0.9, "agent_1": 0.9, "agent_2": 0.99}}, r"discount_factor"),
])
def test_settings_that_do_not_fit_one_team_value_are_clear_errors(tmp_path, cfg, words):
    env = spread_env()
    with pytest.raises((ValueError, TypeError), match=words):
        build(env, str(tmp_path), cfg=cfg)


def test_vdac_mix_without_a_mixer_names_the_missing_role(tmp_path):
    env = spread_env()
    with pytest.raises(KeyError, match="'mixer'"):
        build(env, str(tmp_path), algorithm=VDACMix)


def test_by_default_the_team_value_learns_from_every_sample_however_far_its_targets(tmp_path):
    set_seed(3)
    env = spread_env()
    agent = build(env, str(tmp_path), algorithm=AdvantagesOnly, cfg={"stack_models": False})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    for group in agent.groups:  # in the raw units of the team's returns: targets 10 below, old values 5 above
        memory = group.memory
        values = memory.get_tensor_by_name("old_values").clone()
        memory.set_tensor_by_name("value_targets", values - 10.0)
        memory.set_tensor_by_name("old_values", values + 5.0)
    agent.minibatch_losses(torch.arange(10))["value"].backward()
    gradient = agent.groups[0].models["value"].net[-1].bias.grad
    assert gradient is not None and gradient.abs().sum() > 0  # a value clip of 0.2 around the old value would stop it


def test_vdac_mix_keeps_the_final_state_of_an_episode_that_ended_when_a_rollout_is_cut(tmp_path):
    set_seed(4)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)  # agent_1 leaves after step 3
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    mixer = QMixer(state_space=env.state_space, num_agents=3)
    agent = build(env, str(tmp_path), algorithm=VDACMix, cfg={"rollouts": 10},
                  models={u: {"policy": policy, "value": value, "mixer": mixer} for u in env.possible_agents})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    assert memory.get_tensor_by_name("truncated")[4, :, [0, 2]].all()  # the episodes ended at the fifth step
    stored = memory.get_tensor_by_name("final_states")[4].clone()
    agent.cut_episodes()  # the rollout is cut there (e.g. to evaluate on the training env)
    assert torch.equal(memory.get_tensor_by_name("final_states")[4], stored)

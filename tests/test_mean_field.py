"""Mean-field methods: MFQ and MFAC read each agent's observation and the mean action of the other agents."""

import gymnasium
import pytest
import torch
from helpers import Policy, Value
from mpe2 import simple_spread_v3

from marlparts.agents import MFAC, MFAC_DEFAULT_CONFIG, MFQ, MFQ_DEFAULT_CONFIG
from marlparts.agents.common.mean_field import others_mean_actions
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space

ACTIONS, AGENTS, GAMMA = 5, 3, 0.9


def spread_env(max_cycles=25, continuous=False, copies=2):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=AGENTS, max_cycles=max_cycles,
                                                          continuous_actions=continuous), num_envs=copies, seed=0)


def with_mean_action(env):
    return joint_space([env.observation_space("agent_0"), gymnasium.spaces.Box(0, 1, (ACTIONS,))])


def build_mfq(env, directory, cfg=None, q=None):
    q = q or Value(observation_space=with_mean_action(env), output_size=ACTIONS)
    config = MFQ_DEFAULT_CONFIG.copy()
    config.update({"batch_size": 16, "learning_starts": 4, "discount_factor": GAMMA, **(cfg or {})})
    config["experiment"]["directory"] = directory
    memory = RandomMemory(memory_size=50, num_envs=env.num_envs)
    return MFQ(possible_agents=env.possible_agents, models={u: {"q": q} for u in env.possible_agents},
               memories={u: memory for u in env.possible_agents}, observation_spaces=env.observation_spaces,
               action_spaces=env.action_spaces, device=env.device, cfg=config)


def test_the_mean_action_is_that_of_the_other_active_agents():
    one_hot = torch.eye(ACTIONS)
    joint = torch.cat([one_hot[1], torch.zeros(ACTIONS), one_hot[3], one_hot[3]]).unsqueeze(0)  # agent 1 inactive
    mean = others_mean_actions(joint, torch.tensor([0, 1, 2]), ACTIONS)
    assert torch.allclose(mean[0, 0], (one_hot[3] + one_hot[3]) / 2)            # agents 2 and 3
    assert torch.allclose(mean[0, 1], (one_hot[1] + 2 * one_hot[3]) / 3)        # every active agent: it is not one
    assert torch.allclose(mean[0, 2], (one_hot[1] + one_hot[3]) / 2)            # agents 0 and 3
    alone = others_mean_actions(torch.cat([one_hot[2], torch.zeros(ACTIONS)]).unsqueeze(0), torch.tensor([0]), ACTIONS)
    assert torch.equal(alone, torch.zeros(1, 1, ACTIONS))                      # no other agent active: zeros


def test_mfq_stores_the_mean_action_of_the_previous_step_and_zeros_at_an_episode_s_start(tmp_path):
    set_seed(0)
    env = spread_env(max_cycles=4)
    agent = build_mfq(env, str(tmp_path), cfg={"learning_starts": 100})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 10, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    actions = torch.nn.functional.one_hot(memory.get_tensor_by_name("actions")[:10, :, :, 0], ACTIONS).float()
    mean, following = memory.get_tensor_by_name("mean_actions")[:10], memory.get_tensor_by_name("next_mean_actions")[:10]
    for i in range(AGENTS):
        others = [j for j in range(AGENTS) if j != i]
        assert torch.allclose(following[:, :, i], actions[:, :, others].mean(2)), i  # the mean of the step's actions
    for t in range(10):
        if t % 4 == 0:   # the first step of an episode (episodes of 4 steps)
            assert torch.equal(mean[t], torch.zeros_like(mean[t])), t
        else:
            assert torch.allclose(mean[t], following[t - 1]), t


def test_mfq_target_is_the_boltzmann_expectation_of_the_target_utilities(tmp_path):
    set_seed(1)
    env = spread_env(max_cycles=6)
    agent = build_mfq(env, str(tmp_path), cfg={"temperature": 0.5, "learning_starts": 1000, "batch_size": 40,
                                              "time_limit_bootstrap": False})  # time limits end the return
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 20, "disable_progressbar": True}).train()
    group = agent.groups[0]
    with torch.no_grad():
        for parameter in group.trained["q"].target.parameters():  # a target apart from the online utilities
            parameter.add_(0.1 * torch.randn_like(parameter))
    (batch,) = agent.sample_batch()
    online, target = group.models["q"].net, group.trained["q"].target.net
    with torch.no_grad():
        q = online(torch.cat([batch["observations"], batch["mean_actions"]], -1)).gather(-1, batch["actions"])
        next_inputs = torch.cat([batch["next_observations"], batch["next_mean_actions"]], -1)
        policy = torch.softmax(online(next_inputs) / 0.5, -1)
        y = batch["rewards"] + GAMMA * batch["next_active"] * (policy * target(next_inputs)).sum(-1, keepdim=True)
        by_hand = (q - y).square().mean()
    assert batch["next_active"].logical_not().any()  # some samples end their episode: no bootstrap there
    assert torch.allclose(agent.gradient_update([batch])["Loss / TD"], by_hand, atol=1e-5)


def test_mfq_acts_greedily_in_evaluation_and_learns_its_utilities(tmp_path):
    set_seed(2)
    env = spread_env()
    agent = build_mfq(env, str(tmp_path))
    before = [p.detach().clone() for p in agent.groups[0].models["q"].parameters()]
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 30, "disable_progressbar": True})
    trainer.train()
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.groups[0].models["q"].parameters()))
    agent.set_mode("eval")
    observations, infos = env.reset()
    first = agent.act(observations, None, infos, 0, 0)
    agent.set_mode("eval")  # a new evaluation starts from zero mean actions again
    again = agent.act(observations, None, infos, 0, 0)
    assert all(torch.equal(first[uid], again[uid]) for uid in env.possible_agents)


def test_mfq_refuses_continuous_actions_and_a_q_model_without_the_mean_action(tmp_path):
    with pytest.raises(TypeError, match="agent 'agent_0' has the action space Box"):
        build_mfq(spread_env(continuous=True), str(tmp_path))
    env = spread_env()
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['q'\].*mean action"):
        build_mfq(env, str(tmp_path), q=Value(observation_space=env.observation_space("agent_0"), output_size=ACTIONS))


class AdvantagesOnly(MFAC):
    def update(self, timestep, timesteps):
        self.compute_advantages()


def test_mfac_advantage_is_q_of_the_action_less_the_policy_s_expectation_given_the_others_mean(tmp_path):
    set_seed(3)
    env = spread_env(max_cycles=3)
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    critic = Value(observation_space=with_mean_action(env), output_size=ACTIONS)
    config = MFAC_DEFAULT_CONFIG.copy()
    config.update({"rollouts": 5, "value_preprocessor": None})
    config["experiment"]["directory"] = str(tmp_path)
    agent = AdvantagesOnly(possible_agents=env.possible_agents,
                           models={u: {"policy": policy, "value": critic} for u in env.possible_agents},
                           memories={u: RandomMemory(memory_size=5, num_envs=2) for u in env.possible_agents},
                           observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=config)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    observations, actions = memory.get_tensor_by_name("observations"), memory.get_tensor_by_name("actions")
    one_hot = torch.nn.functional.one_hot(actions.squeeze(-1), ACTIONS).float()   # (T, E, agents, actions)
    with torch.no_grad():
        for i in range(AGENTS):
            others = one_hot[:, :, [j for j in range(AGENTS) if j != i]].mean(2)
            q = critic.net(torch.cat([observations[:, :, i], others], -1))
            probabilities = torch.softmax(policy.net(observations[:, :, i]), -1)
            expected = q.gather(-1, actions[:, :, i]) - (probabilities * q).sum(-1, keepdim=True)
            assert torch.allclose(memory.get_tensor_by_name("advantages")[:, :, i], expected, atol=1e-5), i


def test_mfq_starts_the_mean_action_afresh_after_the_episodes_are_cut(tmp_path):
    set_seed(4)
    env = spread_env()
    agent = build_mfq(env, str(tmp_path), cfg={"learning_starts": 100})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    agent.cut_episodes()  # the trainer resets the env: new episodes begin
    observations, infos = env.reset()
    agent.act(observations, None, infos, 3, 10)
    assert torch.equal(agent.groups[0].cache["mean_actions"], torch.zeros(2, AGENTS, ACTIONS))


def test_mfq_standardises_the_observation_and_not_the_mean_action_after_it(tmp_path):
    set_seed(5)
    env = spread_env()
    agent = build_mfq(env, str(tmp_path), cfg={"observation_preprocessor": RunningStandardScaler})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 12, "disable_progressbar": True}).train()
    scaler = agent.groups[0].trained["q"].input_preprocessor
    assert scaler.running_mean.shape == (env.observation_space("agent_0").shape[0],)
    assert scaler.running_mean.abs().sum() > 0


def test_mfq_means_are_those_of_the_other_agents_when_groups_interleave_the_agents(tmp_path):
    set_seed(6)
    env = spread_env()
    shared = Value(observation_space=with_mean_action(env), output_size=ACTIONS)  # agent_0 and agent_2
    config = MFQ_DEFAULT_CONFIG.copy()
    config.update({"batch_size": 16, "learning_starts": 100})
    config["experiment"]["directory"] = str(tmp_path)
    models = {"agent_0": {"q": shared}, "agent_1": {"q": Value(observation_space=with_mean_action(env),
                                                               output_size=ACTIONS)}, "agent_2": {"q": shared}}
    agent = MFQ(possible_agents=env.possible_agents, models=models,
                memories={u: RandomMemory(memory_size=50, num_envs=2) for u in env.possible_agents},
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=config)
    assert [group.uids for group in agent.groups] == [["agent_0", "agent_2"], ["agent_1"]]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    stored = {}
    for group in agent.groups:
        actions = group.memory.get_tensor_by_name("actions")[:6, :, :, 0]
        following = group.memory.get_tensor_by_name("next_mean_actions")[:6]
        for k, uid in enumerate(group.uids):
            stored[uid] = (torch.nn.functional.one_hot(actions[:, :, k], ACTIONS).float(), following[:, :, k])
    for uid in env.possible_agents:
        others = [stored[other][0] for other in env.possible_agents if other != uid]
        assert torch.allclose(stored[uid][1], sum(others) / 2), uid

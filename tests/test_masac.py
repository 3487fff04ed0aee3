"""MASAC: squashed Gaussian policies, soft targets, learned temperatures, bad input."""

import gymnasium
import numpy as np
import pytest
import torch
from test_maddpg import Net
from toy_envs import ContinuousEnv

from marlparts.agents import MASAC, MASAC_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import Model, SquashedGaussianMixin, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space


class Policy(SquashedGaussianMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(32,))
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def build(env, policy_class=Policy, cfg=None):
    uid = env.possible_agents[0]
    policy = policy_class(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    critic_space = joint_space([*env.observation_spaces.values(), *env.action_spaces.values()])
    critics = {role: Net(observation_space=critic_space, output_size=env.num_agents) for role in ("critic", "critic_2")}
    base = MASAC_DEFAULT_CONFIG.copy()
    base.update(batch_size=128, learning_starts=10)
    base["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    base.update(cfg or {})
    return MASAC(possible_agents=env.possible_agents, models={u: {"policy": policy, **critics} for u in env.possible_agents},
                 memories={u: RandomMemory(memory_size=500, num_envs=env.num_envs) for u in env.possible_agents},
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=base)


def test_squashed_gaussian_log_prob_matches_the_transformed_distribution():
    torch.manual_seed(0)
    space = gymnasium.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 4.0], np.float32))
    policy = Policy(observation_space=gymnasium.spaces.Box(-1, 1, (3,), np.float32), action_space=space)
    obs = torch.randn(256, 3)
    actions, log_prob, outputs = policy.act({"observations": obs})
    assert (actions[:, 0].abs() <= 1).all() and (actions[:, 1] >= 0).all() and (actions[:, 1] <= 4).all()
    mean = policy.compute({"observations": obs})[0]
    low, high = torch.tensor(space.low), torch.tensor(space.high)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, torch.ones_like(mean)),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform((low + high) / 2, (high - low) / 2)])
    clipped = torch.max(torch.min(actions, high - 1e-4), low + 1e-4)  # keep atanh finite in the reference
    inside = ((actions - clipped).abs() < 1e-6).all(-1)
    expected = reference.log_prob(clipped).sum(-1, keepdim=True)
    assert torch.allclose(log_prob[inside], expected[inside], atol=1e-3)
    assert torch.allclose(outputs["mean_actions"], low + (torch.tanh(mean) + 1) * (high - low) / 2)


@pytest.mark.learning
def test_masac_learns_a_continuous_reward_and_tunes_its_temperature():
    # the reward is the first action component in [-1, 1]: the best 5-step return is 5
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=8, seed=0)
    agent = build(env)
    before = agent.alpha(agent.groups[0]).item()
    # 4.2 to 4.4 from 300 steps on (4.38 at 800)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 500, "disable_progressbar": True})
    trainer.train()
    assert trainer.eval(episodes=8)["mean_return"] >= 4.0  # random actions: 0
    assert agent.alpha(agent.groups[0]).item() != before


def test_masac_target_subtracts_the_temperature_times_the_log_probability():
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    agent = build(env, cfg={"learning_starts": 1000, "discount_factor": 0.5})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    batches = agent.sample_batch()
    torch.manual_seed(1)
    targets = agent.target_values(batches)[0]
    torch.manual_seed(1)
    with torch.no_grad():
        actions, log_prob = agent.target_actions(agent.groups[0], batches[0]["next_observations"])
        q = agent.next_q_values(agent.groups[0], agent.critic_observations(batches, "next_observations"),
                                agent.joint([actions]))
    not_done = (~batches[0]["terminated"]).squeeze(-1).float()
    expected = batches[0]["rewards"].squeeze(-1) + 0.5 * not_done * (q - 0.2 * log_prob.squeeze(-1))
    assert torch.allclose(targets, expected, atol=1e-5)


def test_a_policy_without_log_probabilities_is_named():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2)
    with pytest.raises(TypeError, match=r"log-probability.*models\['agent_0'\]\['policy'\] \(Net\) returns None"):
        build(env, policy_class=lambda **kwargs: Net(**kwargs))


def test_the_masac_actor_follows_the_smaller_of_the_twin_critics():
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    agent = build(env, cfg={"learning_starts": 1000})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    batches = agent.sample_batch()
    torch.manual_seed(3)
    before = agent.actor_loss(batches).item()
    with torch.no_grad():
        agent.groups[0].models["critic_2"].net[-1].bias -= 1000.0  # the second critic now much lower
    torch.manual_seed(3)
    assert agent.actor_loss(batches).item() > before + 900

"""Image observations: the SuperSuit preprocessing that docs/images.rst shows, through wrap_env into a cnn policy."""

import pytest
import torch

from marlparts.envs import wrap_env
from marlparts.models import CategoricalMixin, Model, cnn


class PixelPolicy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_actions, input_scale=1 / 255, output_gain=0.01)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def test_pistonball_preprocessed_by_supersuit_reaches_a_cnn_policy_as_the_docs_say():
    supersuit = pytest.importorskip("supersuit")
    pytest.importorskip("pymunk")
    from pettingzoo.butterfly import pistonball_v6

    def make_pistonball():
        env = pistonball_v6.parallel_env(continuous=False)
        env = supersuit.color_reduction_v0(env, mode="B")
        env = supersuit.resize_v1(env, x_size=84, y_size=84)
        return supersuit.frame_stack_v1(env, 3)

    env = wrap_env(make_pistonball, num_envs=2, seed=0, state_source="observations")
    uid = env.possible_agents[0]
    space = env.observation_space(uid)
    assert space.shape == (84, 84, 3) and space.dtype == "uint8" and len(env.possible_agents) == 20
    assert env.state_space.shape == (20 * 84 * 84 * 3,)  # the shrunk observations, not the 560x880x3 frame
    observations, _ = env.reset()
    assert observations[uid].shape == (2, 84 * 84 * 3)
    policy = PixelPolicy(observation_space=space, action_space=env.action_space(uid))
    actions, log_prob, _ = policy.act({"observations": observations[uid]})
    assert actions.shape == (2, 1) and torch.isfinite(log_prob).all()
    env.step({agent: policy.act({"observations": observations[agent]})[0] for agent in env.possible_agents})
    env.close()

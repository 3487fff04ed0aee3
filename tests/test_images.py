"""Image observations: the SuperSuit preprocessing that docs/images.rst shows, through wrap_env into a cnn policy."""

import importlib.util
import pathlib

import gymnasium
import numpy as np
import pytest
import torch
from pettingzoo import ParallelEnv

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, cnn
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


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
        env = pistonball_v6.parallel_env(continuous=False, render_mode="rgb_array")
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
    assert_pistons_see_themselves_move(env)
    env.close()


def assert_pistons_see_themselves_move(env):
    """Every piston moves up for 3 steps: each one's newest frame changes from step to step, and its 3 stacked
    frames differ from one another (pistonball draws its screen only where a render mode is set; without one
    every observation is the first frame, whatever the pistons do)."""
    up = {uid: torch.full((env.num_envs, 1), 2) for uid in env.possible_agents}
    frames = []
    for _ in range(3):
        observations = env.step(up)[0]
        frames.append(torch.stack([observations[uid].reshape(env.num_envs, 84, 84, 3) for uid in env.possible_agents]))
    newest = [stack[..., -1].float() for stack in frames]
    assert all((later - earlier).abs().amax(dim=(2, 3)).gt(0).all() for earlier, later in zip(newest, newest[1:]))
    assert (frames[-1][..., 0].float() - frames[-1][..., 2].float()).abs().amax(dim=(2, 3)).gt(0).all()


def load_pistonball_example():
    """``examples/pettingzoo/pistonball_ippo.py`` as a module (skips the test without SuperSuit and pymunk)."""
    pytest.importorskip("supersuit")
    pytest.importorskip("pymunk")
    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "pettingzoo" / "pistonball_ippo.py"
    spec = importlib.util.spec_from_file_location("pistonball_ippo", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_pixel_example_s_pistons_see_themselves_move_and_its_encoder_centres_the_frames(tmp_path):
    """The pistons see their own moves (see above); and the example's encoder hands its convolutions each frame
    centred on its own mean. Pistonball's frames are nearly white: uncentred, every weight of a first-layer filter
    acted as a bias and the first convolution went dark within the first updates
    (``benchmarks/pistonball_layer_activity.py``)."""
    example = load_pistonball_example()
    env = example.make_env(num_envs=2, seed=0)
    env.reset()
    assert_pistons_see_themselves_move(env)
    stay = {uid: torch.ones(env.num_envs, 1, dtype=torch.long) for uid in env.possible_agents}
    observations = env.step(stay)[0]
    frames = torch.cat([observations[uid] for uid in env.possible_agents])
    assert frames.reshape(-1, 84, 84, 3).float().mean() / 255 > 0.8  # what the convolutions would see uncentred
    agent = example.make_agent(env, str(tmp_path))
    first_layer_input = agent.models[env.possible_agents[0]]["policy"].encoder[0][0](frames)
    assert first_layer_input.shape == (40, 3, 84, 84)
    assert first_layer_input.mean(dim=(2, 3)).abs().max() < 1e-5
    assert first_layer_input.std() > 0.05  # the pistons and the ball are still there
    env.close()


class PixelEnv(ParallelEnv):
    """Two agents see random 4x4x2 images of bytes (declared with ``dtype``); the reward is the first pixel over 255
    if the action is 1, else 0.5; episodes of 6 steps."""

    metadata = {"name": "pixels_v0"}

    def __init__(self, dtype):
        self.possible_agents = ["agent_0", "agent_1"]
        self.dtype = dtype
        self.rng = np.random.default_rng(0)
        self.image_space = gymnasium.spaces.Box(0, 255, (4, 4, 2), dtype=dtype)
        self.move_space = gymnasium.spaces.Discrete(2)

    def observation_space(self, agent):
        return self.image_space

    def action_space(self, agent):
        return self.move_space

    def _observe(self):
        self.images = {agent: self.rng.integers(0, 256, (4, 4, 2)).astype(self.dtype) for agent in self.agents}
        return dict(self.images)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions):
        rewards = {agent: float(self.images[agent][0, 0, 0]) / 255 if actions[agent] == 1 else 0.5
                   for agent in self.agents}
        self.t += 1
        done = self.t >= 6
        observations = self._observe()
        result = (observations, rewards, {a: False for a in self.agents}, {a: done for a in self.agents},
                  {a: {} for a in self.agents})
        if done:
            self.agents = []
        return result


class SmallPolicy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_actions, channels=(4,), kernel_sizes=(3,), strides=(1,),
                       hidden_sizes=(16,), input_scale=1 / 255, output_gain=0.01)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class SmallValue(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, 1, channels=(4,), kernel_sizes=(3,), strides=(1,),
                       hidden_sizes=(16,), input_scale=1 / 255)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class MisdeclaredPixelEnv(PixelEnv):
    """Declares images of bytes but gives ``agent_1`` its image scaled to [0, 1], as a wrapper that divides the
    pixels by 255 without changing the declared space does."""

    def _observe(self):
        observations = super()._observe()
        observations["agent_1"] = observations["agent_1"] / 255.0
        return observations


def train_on_pixels(dtype, directory, env_class=PixelEnv):
    set_seed(0)
    env = wrap_env(lambda: env_class(dtype), num_envs=3, seed=0)
    uid = env.possible_agents[0]
    models = {"policy": SmallPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
              "value": SmallValue(observation_space=env.observation_space(uid))}
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=6, learning_epochs=2, mini_batches=2)
    cfg["experiment"].update(directory=str(directory), tensorboard=False, csv=False, checkpoint_interval=0)
    agent = IPPO(possible_agents=env.possible_agents, models={u: models for u in env.possible_agents},
                 memories={u: RandomMemory(memory_size=6, num_envs=3) for u in env.possible_agents},
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 18, "disable_progressbar": True}).train()
    env.close()
    return agent


def test_ppo_holds_images_of_bytes_as_bytes_and_trains_exactly_as_on_floats(tmp_path):
    """Observations of a uint8 Box are stored as uint8 in the rollout (a quarter of float32's bytes) and read back
    as floats: three updates give the same parameters as the same images declared as float32."""
    on_bytes = train_on_pixels(np.uint8, tmp_path / "bytes")
    on_floats = train_on_pixels(np.float32, tmp_path / "floats")
    stored = on_bytes.groups[0].memory.tensors["observations"]
    assert stored.dtype == torch.uint8 and on_floats.groups[0].memory.tensors["observations"].dtype == torch.float32
    per_step = stored[0].numel() * stored.element_size()
    assert per_step == 3 * 2 * 4 * 4 * 2  # copies x agents x pixels x one byte
    for role in ("policy", "value"):
        for (name, left), right in zip(on_bytes.groups[0].models[role].state_dict().items(),
                                       on_floats.groups[0].models[role].state_dict().values()):
            assert torch.equal(left, right), (role, name)


def test_ppo_refuses_observations_that_break_their_declared_byte_space_naming_the_agent(tmp_path):
    """Observations of a uint8 Box that are not whole numbers 0-255 would be truncated or wrapped in the byte
    rollout, and the update would train on other numbers than the policy acted on: the step is refused, naming the
    agent and its observation space."""
    with pytest.raises(ValueError, match=r"agent 'agent_1'.*env copy \d.*Box\(0, 255, \(4, 4, 2\), uint8\)"):
        train_on_pixels(np.uint8, tmp_path, MisdeclaredPixelEnv)

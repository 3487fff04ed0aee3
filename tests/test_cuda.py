"""The CUDA path: env outputs, models, memories and updates all on the GPU; checkpoints move to the CPU.

Skipped where PyTorch sees no CUDA device.
"""

import pytest
import torch
from spread_agents import make_spread_agent, make_spread_env

from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# (algorithm, continuous actions, vectorized steps: enough for several updates)
CASES = [("mappo", False, 250), ("ippo", False, 250), ("maddpg", True, 120), ("maddpg", False, 120), ("matd3", True, 120)]


def build(name, env, directory, **overrides):
    return make_spread_agent(name, env, directory, experiment={"tensorboard": False, "csv": False, "checkpoint_interval": 0,
                                                               "directory": directory}, **overrides)


@pytest.mark.parametrize("name, continuous, steps", CASES)
def test_training_on_cuda_keeps_everything_on_the_gpu_and_checkpoints_load_on_cpu(name, continuous, steps, tmp_path):
    def make_env(device):
        return make_spread_env(4, seed=0, continuous=continuous, device=device)

    set_seed(0)
    env = make_env("cuda")
    agent = build(name, env, str(tmp_path))
    observations, infos = env.reset()
    assert all(value.is_cuda for value in observations.values())
    assert env.state().is_cuda

    before = [parameter.detach().clone() for model in agent.distinct_models() for parameter in model.parameters()]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()
    after = [parameter.detach() for model in agent.distinct_models() for parameter in model.parameters()]
    assert all(parameter.is_cuda for parameter in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "no parameter changed: no update ran"
    for group in agent.groups:
        for tensor_name, tensor in group.memory.tensors.items():
            assert tensor.is_cuda, f"memory tensor {tensor_name} is not on the GPU"

    # fresh copies with the same seed start from the same observations on either device
    gpu_env, cpu_env = make_env("cuda"), make_env("cpu")
    observations, infos = gpu_env.reset()
    cpu_observations, cpu_infos = cpu_env.reset()
    agent.set_mode("eval")
    actions = agent.act(observations, gpu_env.state(), infos, 0, 1)
    assert all(action.is_cuda for action in actions.values())

    checkpoint = str(tmp_path / "agent.pt")
    agent.save(checkpoint)
    cpu_agent = build(name, cpu_env, str(tmp_path / "cpu"))
    cpu_agent.load(checkpoint)
    cpu_agent.set_mode("eval")
    cpu_actions = cpu_agent.act(cpu_observations, cpu_env.state(), cpu_infos, 0, 1)
    for uid in env.possible_agents:
        assert torch.allclose(cpu_actions[uid].float(), actions[uid].cpu().float(), atol=1e-4), uid
    for opened in (env, gpu_env, cpu_env):
        opened.close()


@pytest.mark.parametrize("name", ["mappo", "maddpg"])
def test_mixed_precision_trains_on_cuda(name, tmp_path):
    set_seed(0)
    env = make_spread_env(4, seed=0, continuous=name == "maddpg", device="cuda")
    agent = build(name, env, str(tmp_path), mixed_precision=True)
    assert agent._grad_scaler is not None
    before = [parameter.detach().clone() for model in agent.distinct_models() for parameter in model.parameters()]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 120, "disable_progressbar": True}).train()
    after = [parameter.detach() for model in agent.distinct_models() for parameter in model.parameters()]
    assert all(torch.isfinite(parameter).all() for parameter in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "no parameter changed: no update ran"
    env.close()


@pytest.mark.parametrize("name", ["mappo", "maddpg"])
def test_a_checkpoint_loads_into_an_algorithm_on_cuda(name, tmp_path):
    set_seed(0)
    env = make_spread_env(4, seed=0, continuous=name == "maddpg", device="cuda")
    agent = build(name, env, str(tmp_path))
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 120, "disable_progressbar": True}).train()
    checkpoint = str(tmp_path / "agent.pt")
    agent.save(checkpoint)
    loaded = build(name, env, str(tmp_path / "loaded"))
    loaded.load(checkpoint)
    for original, restored in zip(agent.distinct_models(), loaded.distinct_models()):
        for a, b in zip(original.parameters(), restored.parameters()):
            assert b.is_cuda and torch.equal(a, b)
    assert loaded.timestep == agent.timestep
    env.close()


def test_vmas_training_on_cuda_keeps_every_tensor_on_the_gpu(tmp_path):
    """VMAS balance on the GPU with the example's MAPPO: env outputs, the final observations, the state, the
    memories and the models stay on the device through several updates and resets."""
    vmas = pytest.importorskip("vmas")
    import functools

    from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
    from marlparts.envs import wrap_env
    from marlparts.memories import RandomMemory
    from marlparts.models import DeterministicMixin, GaussianMixin, Model, mlp

    class Policy(GaussianMixin, Model):
        clip_actions = True

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = mlp(self.num_observations, self.num_actions)
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    class Value(DeterministicMixin, Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = mlp(self.num_observations, self.num_outputs)

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    env = wrap_env(functools.partial(vmas.make_env, "balance", device="cuda", continuous_actions=True, max_steps=20,
                                     terminated_truncated=True, n_agents=3), num_envs=256, seed=0)
    observations, infos = env.reset()
    assert observations.data.is_cuda and env.state().is_cuda and env.device.type == "cuda"
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.state_space, output_size=env.num_agents)
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update({"rollouts": 16, "experiment": {"directory": str(tmp_path), "tensorboard": False, "csv": False,
                                               "checkpoint_interval": 0}})
    memories = {u: RandomMemory(memory_size=16, num_envs=env.num_envs) for u in env.possible_agents}
    agent = MAPPO(possible_agents=env.possible_agents, models={u: {"policy": policy, "value": value}
                                                               for u in env.possible_agents},
                  memories=memories, observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, device=env.device, cfg=cfg)
    before = [p.detach().clone() for p in policy.parameters()]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 64, "disable_progressbar": True}).train()
    assert all(p.is_cuda for p in policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert all(memory.get_tensor_by_name("observations").is_cuda for memory in memories.values())
    *_, infos = env.step({u: torch.zeros(256, 2, device="cuda") for u in env.possible_agents})
    assert infos["final_observation"].data.is_cuda and infos["episode_end"].is_cuda


def test_a_seeded_vmas_reset_leaves_the_global_cuda_generator_alone():
    """VMAS's seed() re-seeds every CUDA generator; the wrapper keeps the env's own CUDA stream apart, so an
    evaluation's seeded reset does not restart the models' sampling on the GPU."""
    vmas = pytest.importorskip("vmas")
    import functools

    from marlparts.envs import wrap_env

    factory = functools.partial(vmas.make_env, "balance", device="cuda", continuous_actions=True, max_steps=20,
                                terminated_truncated=True, n_agents=3)
    env = wrap_env(factory, num_envs=8, seed=0)
    torch.cuda.manual_seed(123)
    expected = torch.cuda.get_rng_state()
    env.reset()
    env.make_evaluation_env(4).reset(seed=5)
    assert torch.equal(torch.cuda.get_rng_state(), expected)
    first = wrap_env(factory, num_envs=8, seed=0).reset()[0].data
    again = wrap_env(factory, num_envs=8, seed=0).reset()[0].data
    assert torch.equal(first, again)  # the env's own CUDA stream follows its seed

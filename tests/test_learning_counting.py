"""Short learning runs of VDAC, COMA, MFQ, MFAC, IA2C and MAA2C on the counting task, each beside a broken copy of
itself.

Every step rewards the action taken (0..3) over 5-step episodes, and ``agent_1`` leaves after its third
step, so inactive steps are in play: the best mean return over the agents is (15 + 9 + 15) / 3 = 13 and
uniform random actions score 6.5. Each algorithm must reach 12 after its budget, and the same algorithm
with one sign turned (the advantages for the actor-critics, the rewards of the TD target for MFQ) must
stay below it: it learns to pick the worst action. Measured with these settings (seed 0): each of the
four reached 13.0, and each broken copy 0.0; IA2C and MAA2C (one gradient step per rollout) 13.0 and
13.0, their broken copies 1.33 and 0.33.
"""

import gymnasium
import pytest
import torch
from helpers import Policy, Value
from toy_envs import CountingEnv

from marlparts.agents import (
    COMA,
    COMA_DEFAULT_CONFIG,
    IA2C,
    IA2C_DEFAULT_CONFIG,
    MAA2C,
    MAA2C_DEFAULT_CONFIG,
    MFAC,
    MFAC_DEFAULT_CONFIG,
    MFQ,
    MFQ_DEFAULT_CONFIG,
    VDAC,
    VDAC_DEFAULT_CONFIG,
)
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space

THRESHOLD = 12.0
ACTIONS = 4


def flipped_advantages(algorithm):
    class Broken(algorithm):
        def compute_advantages(self):
            super().compute_advantages()
            for group in self.groups:
                group.memory.set_tensor_by_name("advantages", -group.memory.get_tensor_by_name("advantages"))
    return Broken


class FlippedRewardMFQ(MFQ):
    def gradient_update(self, batches):
        return super().gradient_update([{**batch, "rewards": -batch["rewards"]} for batch in batches])


def build(name, env, broken):
    uid = env.possible_agents[0]
    obs_space, action_space = env.observation_space(uid), env.action_space(uid)
    with_mean = joint_space([obs_space, gymnasium.spaces.Box(0, 1, (ACTIONS,))])
    policy = Policy(observation_space=obs_space, action_space=action_space)
    if name == "mfq":
        cfg = MFQ_DEFAULT_CONFIG.copy()
        cfg.update(batch_size=128, learning_starts=10, learning_rate=1e-3, discount_factor=0.9)
        cfg["exploration"]["timesteps"] = 200
        q = Value(observation_space=with_mean, output_size=ACTIONS)
        models = {u: {"q": q} for u in env.possible_agents}
        memories = {u: RandomMemory(memory_size=500, num_envs=env.num_envs) for u in env.possible_agents}
        algorithm = FlippedRewardMFQ if broken else MFQ
    else:
        defaults = {"vdac": VDAC_DEFAULT_CONFIG, "coma": COMA_DEFAULT_CONFIG, "mfac": MFAC_DEFAULT_CONFIG,
                    "ia2c": IA2C_DEFAULT_CONFIG, "maa2c": MAA2C_DEFAULT_CONFIG}[name]
        cfg = defaults.copy()
        cfg.update(rollouts=10, learning_rate=3e-3, discount_factor=0.9)
        if name not in ("ia2c", "maa2c"):  # A2C keeps its one gradient step per rollout
            cfg["mini_batches"] = 2
        if name in ("vdac", "ia2c"):
            value = Value(observation_space=obs_space)
        elif name == "maa2c":
            value = Value(observation_space=env.state_space, output_size=len(env.possible_agents))
        elif name == "coma":
            value = Value(observation_space=joint_space([env.state_space, gymnasium.spaces.Box(0, 1, (3 * ACTIONS + 3,))]),
                          output_size=ACTIONS)
        else:
            value = Value(observation_space=with_mean, output_size=ACTIONS)
        models = {u: {"policy": policy, "value": value} for u in env.possible_agents}
        memories = {u: RandomMemory(memory_size=10, num_envs=env.num_envs) for u in env.possible_agents}
        algorithm = {"vdac": VDAC, "coma": COMA, "mfac": MFAC, "ia2c": IA2C, "maa2c": MAA2C}[name]
        algorithm = flipped_advantages(algorithm) if broken else algorithm
    cfg["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces, cfg=cfg)


def greedy_return(name, broken, timesteps=600, seed=0):
    set_seed(seed)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=8, seed=seed)
    agent = build(name, env, broken)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "disable_progressbar": True})
    trainer.train()
    return trainer.eval(episodes=16)["mean_return"]


@pytest.mark.learning
@pytest.mark.parametrize("name", ["vdac", "coma", "mfq", "mfac", "ia2c", "maa2c"])
def test_learns_the_best_action_where_a_broken_copy_cannot(name):
    torch.set_num_threads(1)
    learned, broken = greedy_return(name, broken=False), greedy_return(name, broken=True)
    print(f"{name}: greedy mean return {learned:.2f}, broken copy {broken:.2f} (random 6.5, best 13)")
    assert learned >= THRESHOLD > broken

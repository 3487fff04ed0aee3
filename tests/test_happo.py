"""HAPPO: one policy per agent, updated in a random order on advantages weighted by the earlier agents' ratios."""

import pytest
import torch
from helpers import Policy, Value
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.agents import HAPPO, HAPPO_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


class AdvantageSpy(HAPPO):
    """Keeps, per agent, the stored advantages its policy's losses read at the first minibatch of an update."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = {}

    def policy_losses(self, group, indexes):
        self.seen.setdefault(group.uids[0], group.memory.get_tensor_by_name("advantages").clone())
        return super().policy_losses(group, indexes)


def build(env, directory, *, algorithm=HAPPO, share_policy=False, own_critics=False, cfg=None):
    value = Value(observation_space=env.state_space, output_size=env.num_agents)
    shared = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    models = {uid: {"policy": shared if share_policy else Policy(observation_space=env.observation_space(uid),
                                                                   action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.state_space, output_size=env.num_agents) if own_critics
                    else value} for uid in env.possible_agents}
    config = HAPPO_DEFAULT_CONFIG.copy()
    config.update({"rollouts": 5, "learning_epochs": 1, "mini_batches": 1, **(cfg or {})})
    config["experiment"]["directory"] = directory
    memories = {uid: RandomMemory(memory_size=config["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces, device=env.device, cfg=config)


def log_probabilities(agent, uid):
    """By hand: the log-probability of each stored action under the agent's policy as it is now."""
    group = next(group for group in agent.groups if group.uids == [uid])
    memory = group.memory
    observations = memory.get_tensor_by_name("observations", keepdim=False).flatten(0, 1)
    actions = memory.get_tensor_by_name("actions", keepdim=False).flatten(0, 1)
    with torch.no_grad():
        logits = group.models["policy"].net(observations)
    return torch.log_softmax(logits, dim=-1).gather(1, actions).reshape(-1)


def test_each_agent_learns_on_advantages_weighted_by_the_ratios_of_the_agents_updated_before_it(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=2, seed=0)
    agent = build(env, str(tmp_path), algorithm=AdvantageSpy, cfg={"learning_rate": 0.05})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    order = list(agent.seen)
    assert sorted(order) == ["agent_0", "agent_1", "agent_2"]
    factor = torch.ones(10)
    for uid in order:
        group = next(group for group in agent.groups if group.uids == [uid])
        stored = group.memory.get_tensor_by_name("advantages")  # restored to the unweighted ones after the update
        assert torch.allclose(agent.seen[uid].reshape(-1), stored.reshape(-1) * factor, atol=1e-6), uid
        old = group.memory.get_tensor_by_name("log_prob").reshape(-1)
        factor = factor * (log_probabilities(agent, uid) - old).exp()
    assert not torch.allclose(factor, torch.ones(10))  # the policies moved: the weights are not all 1


def test_the_order_of_the_agents_is_drawn_anew_at_each_update(tmp_path):
    set_seed(1)
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=2, seed=0)
    agent = build(env, str(tmp_path), algorithm=AdvantageSpy)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True})
    orders = set()
    for _ in range(8):
        agent.seen = {}
        trainer.train()
        orders.add(tuple(agent.seen))
    assert len(orders) > 1


@pytest.mark.parametrize("own_critics", [False, True])
def test_agents_that_share_a_policy_are_refused_by_name(own_critics, tmp_path):
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=2, seed=0)
    with pytest.raises(ValueError, match=r"may not share a policy.*\['agent_0', 'agent_1', 'agent_2'\]"):
        build(env, str(tmp_path), share_policy=True, own_critics=own_critics)


def test_an_agent_that_sat_out_the_whole_rollout_takes_no_step(tmp_path):
    """agent_1 leaves at step 1 of 50-step episodes: it acts in the first rollout of 5 steps, in none of the second.
    Its losses there are empty and its gradients zeros, on which Adam's momentum would still move its policy."""
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=50, leave_at=1), num_envs=2, seed=0)
    agent = build(env, str(tmp_path), cfg={"learning_epochs": 2, "learning_rate": 1e-2})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True})
    trainer.train()  # the first update: agent_1 acted, its optimizer has momentum
    before = {uid: [p.detach().clone() for p in agent.models[uid]["policy"].parameters()] for uid in ("agent_0", "agent_1")}
    trainer.cfg["timesteps"] = 10
    trainer.train()
    assert not agent.groups[1].memory.get_tensor_by_name("active").any()  # agent_1 sat out the second rollout
    after = {uid: list(agent.models[uid]["policy"].parameters()) for uid in before}
    assert all(torch.equal(a, b) for a, b in zip(before["agent_1"], after["agent_1"]))
    assert not all(torch.equal(a, b) for a, b in zip(before["agent_0"], after["agent_0"]))


class FullLosses(HAPPO):
    """HAPPO whose policy steps also run the critic and whose critic steps also run the policies (PPO's whole losses)."""

    def policy_losses(self, group, indexes):
        return self.group_losses(group, indexes)

    def value_losses(self, group, indexes):
        return self.group_losses(group, indexes)


def test_running_only_the_trained_model_in_each_step_changes_no_result(tmp_path):
    runs = []
    for algorithm in (HAPPO, FullLosses):
        set_seed(0)
        env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)
        agent = build(env, str(tmp_path / algorithm.__name__), algorithm=algorithm,
                      cfg={"learning_epochs": 2, "mini_batches": 2, "rollouts": 6})
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 18, "disable_progressbar": True}).train()
        runs.append(agent)
    first, second = (agent.state_dict()["modules"] for agent in runs)
    for name in first:
        for key, value in first[name].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, second[name][key]), f"{name}/{key}"


class NobodyActs(HAPPO):
    """Marks every stored step inactive once the advantages are computed: no agent acted in the rollout."""

    def compute_advantages(self):
        super().compute_advantages()
        for group in self.groups:
            group.memory.get_tensor_by_name("active").fill_(False)


def test_a_rollout_where_no_agent_acted_trains_nothing_and_runs_no_backward_pass(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)
    agent = build(env, str(tmp_path), algorithm=NobodyActs)
    before = {name: [t.clone() for t in part.state_dict().values()] for name, part in agent.checkpoint_parts().items()
              if isinstance(part, torch.nn.Module)}
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    for name, part in agent.checkpoint_parts().items():
        if isinstance(part, torch.nn.Module) and name in before and not name.startswith(("preprocessor", "value_normaliser")):
            assert all(torch.equal(a, b) for a, b in zip(before[name], part.state_dict().values())), name
            # no gradient computed for nothing (and, with mixed precision, no scaler update without a step)
            assert all(parameter.grad is None for parameter in part.parameters()), name

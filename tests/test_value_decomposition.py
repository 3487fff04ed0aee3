"""QMIX and VDN: monotonic mixing, double-Q team targets, masks, inactive agents, bad input."""

import gymnasium
import numpy as np
import pytest
import torch
from toy_envs import ContinuousEnv, CountingEnv

from marlparts.agents import QMIX, QMIX_DEFAULT_CONFIG, VDN, VDN_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, Model, QMixer, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


class Utility(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(32,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def build(env, algorithm=QMIX, cfg=None, share=True, with_state=True, memory_size=500):
    uid = env.possible_agents[0]
    outputs = env.action_space(uid).n if hasattr(env.action_space(uid), "n") else 2
    shared = Utility(observation_space=env.observation_space(uid), output_size=outputs)
    models = {u: {"q": shared if share else Utility(observation_space=env.observation_space(u), output_size=outputs)}
              for u in env.possible_agents}
    if algorithm is QMIX:
        mixer = QMixer(state_space=env.state_space, num_agents=env.num_agents)
        for roles in models.values():
            roles["mixer"] = mixer
    base = (QMIX_DEFAULT_CONFIG if algorithm is QMIX else VDN_DEFAULT_CONFIG).copy()
    base.update(batch_size=128, learning_starts=10, discount_factor=0.9)
    base["exploration"]["timesteps"] = 200
    base["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    base.update(cfg or {})
    return algorithm(possible_agents=env.possible_agents, models=models,
                     memories={u: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for u in env.possible_agents},
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces if with_state else None, cfg=base)


def test_the_qmix_mixer_is_monotonic_in_every_agents_value():
    torch.manual_seed(0)
    mixer = QMixer(state_space=gymnasium.spaces.Box(-1, 1, (6,), np.float32), num_agents=3)
    values = torch.randn(64, 3, requires_grad=True)
    team, _, _ = mixer.act({"observations": torch.randn(64, 6), "agent_values": values})
    team.sum().backward()
    assert (values.grad >= 0).all()


# budgets: one-step QMIX keeps 1500 steps (1000 fell below the bar once); VDN and 3-step QMIX score 15 from 500 on
@pytest.mark.learning
@pytest.mark.parametrize("algorithm,n_step,timesteps", [(QMIX, 1, 1500), (VDN, 1, 800), (QMIX, 3, 800)])
def test_value_decomposition_learns_the_best_action(algorithm, n_step, timesteps):
    # every step rewards the action taken (0..3): the best team return per agent is 15, random 7.5
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=8, seed=0)
    agent = build(env, algorithm, cfg={"n_step": n_step})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "disable_progressbar": True})
    trainer.train()
    assert trainer.eval(episodes=8)["mean_return"] >= 13.5  # random actions 7.5, the best 15


def test_vdn_team_target_is_the_double_q_sum_over_agents_that_go_on():
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=2), num_envs=2, seed=0)
    agent = build(env, VDN, cfg={"learning_starts": 1000})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    names = agent.replay_names()
    batch = dict(zip(names, agent.groups[0].memory.sample_by_index(names, torch.arange(16))))
    target = agent.team_targets([batch])
    with torch.no_grad():
        q = agent.groups[0].models["q"]
        online = q.act({"observations": batch["next_observations"].flatten(0, 1)})[0].unflatten(0, (16, 3))
        frozen = agent.groups[0].trained["q"].target.act(
            {"observations": batch["next_observations"].flatten(0, 1)})[0].unflatten(0, (16, 3))
    next_value = frozen.gather(-1, online.argmax(-1, keepdim=True)).squeeze(-1)
    goes_on = batch["next_active"].squeeze(-1)
    active = batch["active"].squeeze(-1)
    reward = (batch["rewards"].squeeze(-1) * active).sum(-1) / active.sum(-1)
    expected = reward + 0.9 * (next_value * goes_on).sum(-1)
    assert torch.allclose(target, expected, atol=1e-5)
    # agent_1 leaves at step 2: it goes on after step 1 only; at the copy's time limit (step 4) the others go on
    by_step = goes_on.view(8, 2, 3)  # (steps, copies, agents)
    assert by_step[:, :, 1].all(dim=1).tolist() == [True, False, False, False] * 2
    assert by_step[[3, 7]][:, :, [0, 2]].all()


def test_masked_actions_are_never_taken_nor_valued():
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=6, leave_at=99, masked=True), num_envs=4, seed=0)
    agent = build(env, QMIX, cfg={"learning_starts": 4})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 40, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    observations, actions = memory.get_tensor_by_name("observations"), memory.get_tensor_by_name("actions")
    odd_steps = observations[..., 0] % 2 == 1  # action 0 is forbidden on odd steps
    assert not (actions[..., 0][odd_steps] == 0).any()
    assert not memory.get_tensor_by_name("next_action_mask")[..., 0].all()  # the masks of the next steps are stored


def test_inactive_agents_values_do_not_enter_the_mixer():
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=1), num_envs=2, seed=0)
    agent = build(env, QMIX, cfg={"learning_starts": 1000})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    names = agent.replay_names()
    batch = dict(zip(names, agent.groups[0].memory.sample_by_index(names, torch.arange(16))))
    recorded = []
    original = agent.mix
    agent.mix = lambda record, values, states, target: recorded.append(values) or original(record, values, states,
                                                                                            target=target)
    inactive = ~batch["active"].squeeze(-1)
    assert inactive.any()
    agent.gradient_update([batch])
    assert (recorded[0][inactive] == 0).all()


def test_bad_input_is_named():
    continuous = wrap_env(lambda: ContinuousEnv(), num_envs=2)
    with pytest.raises(TypeError, match=r"agent_0.*Box.*MADDPG, MATD3 or MASAC"):
        build(continuous, QMIX)
    discrete = wrap_env(lambda: CountingEnv(), num_envs=2)
    with pytest.raises(ValueError, match="global state.*state_spaces=env.state_spaces"):
        build(discrete, QMIX, with_state=False)
    assert isinstance(build(discrete, VDN, with_state=False), VDN)  # a sum needs no state


@pytest.mark.learning
def test_the_worked_example_of_the_docs_learns(tmp_path):
    import importlib.util
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "writing_algorithms.rst").read_text()
    (code,) = re.findall(r"\.\. code-block:: python\n\n(.*?)\n\S", page, flags=re.S)
    module_path = tmp_path / "iql.py"
    module_path.write_text("\n".join(line[4:] for line in code.splitlines()) + "\n")
    spec = importlib.util.spec_from_file_location("iql", module_path)
    iql = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(iql)
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=8, seed=0)
    agent = build(env, iql.IQL)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1500, "disable_progressbar": True})
    trainer.train()
    assert trainer.eval(episodes=8)["mean_return"] >= 13.5  # random actions 7.5, the best 15


def test_groups_with_memories_of_other_sizes_are_an_error():
    env = wrap_env(lambda: CountingEnv(), num_envs=2, seed=0)
    models = {u: {"q": Utility(observation_space=env.observation_space(u), output_size=4)} for u in env.possible_agents}
    memories = {u: RandomMemory(memory_size=size, num_envs=2) for u, size in zip(env.possible_agents, (600, 700, 700))}
    with pytest.raises(ValueError, match=r"memories\['agent_1'\].*700.*memories\['agent_0'\].*600"):
        VDN(possible_agents=env.possible_agents, models=models, memories=memories,
            observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=VDN_DEFAULT_CONFIG.copy())


def test_a_time_limit_bootstraps_over_the_actions_legal_at_the_final_observation():
    # CountingEnv forbids action 0 on odd steps; episodes end (time limit) at step 5
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99, masked=True), num_envs=2, seed=0)
    agent = build(env, VDN, cfg={"learning_starts": 1000})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    next_mask = agent.groups[0].memory.get_tensor_by_name("next_action_mask")
    assert not next_mask[4, :, :, 0].any(), "at the final observation (step 5) action 0 is illegal"


def walked_n_step_targets(agent, indexes, gamma, n_step):
    """The n-step VDN targets at flat replay ``indexes``, walked step by step on the stored tensors of a
    one-group agent: a sum goes on to the copy's next stored step while the env's step counter (observation
    column 0) goes up by one and every agent that acted acts again (none left, terminated or cut alone).
    """
    memory = agent.groups[0].memory
    size, copies = memory.memory_size, memory.num_envs
    stored = {name: memory.get_tensor_by_name(name) for name in
              ("observations", "next_observations", "rewards", "active", "terminated", "next_active")}
    rows = size if memory.filled else memory.memory_index
    order = [(memory.memory_index + i) % size for i in range(size)] if memory.filled else list(range(rows))
    q, frozen = agent.groups[0].models["q"], agent.groups[0].trained["q"].target
    expected = []
    for index in indexes.tolist():
        step, copy = divmod(index, copies)
        position = order.index(step)
        total, k = 0.0, 0
        while True:
            s = order[position + k]
            active = stored["active"][s, copy, :, 0]
            total += gamma ** k * float((stored["rewards"][s, copy, :, 0] * active).sum() / active.sum().clamp(min=1))
            k += 1
            if k == n_step or position + k == rows:
                break
            following = order[position + k]
            same_episode = stored["observations"][following, copy, 0, 0] == stored["observations"][s, copy, 0, 0] + 1
            if not same_episode or (active & ~stored["active"][following, copy, :, 0]).any():
                break
        with torch.no_grad():
            next_obs = stored["next_observations"][s, copy]
            online, values = q.act({"observations": next_obs})[0], frozen.act({"observations": next_obs})[0]
        next_value = (values.gather(-1, online.argmax(-1, keepdim=True)).squeeze(-1) * stored["next_active"][s, copy, :, 0]).sum()
        done = bool(stored["terminated"][s, copy, :, 0][stored["active"][s, copy, :, 0]].all())
        expected.append(total + gamma ** k * (0.0 if done else float(next_value)))
    return torch.tensor(expected)


def n_step_targets_at(agent, indexes):
    """The agent's own targets at flat replay ``indexes``."""
    agent.groups[0].memory.sample_indexes = lambda batch_size: indexes
    return agent.team_targets(agent.sample_batch())


@pytest.mark.parametrize("leave_by", ["terminated", "truncated"])
def test_n_step_targets_sum_the_rewards_of_the_episode_and_bootstrap_from_its_last_stored_step(leave_by):
    # agent_1 leaves at step 2 (its episode ends: terminated, or cut by a time limit of its own, which
    # bootstraps from its final observation), the copies' episodes end at step 4; 6 stored steps of
    # 2 copies after 9 steps, so the storage has wrapped and the newest step cuts the sums short
    set_seed(0)
    gamma, n_step = 0.9, 3
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=2, leave_by=leave_by), num_envs=2, seed=0)
    agent = build(env, VDN, cfg={"learning_starts": 1000, "n_step": n_step, "batch_size": 8}, memory_size=6)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 9, "disable_progressbar": True}).train()
    indexes = torch.arange(12)
    assert torch.allclose(n_step_targets_at(agent, indexes), walked_n_step_targets(agent, indexes, gamma, n_step),
                          atol=1e-5)
    assert (agent.sample_batch()[0]["n_step_valid"].sum(1) == 1).any()  # some sums were cut to one step


def test_an_n_step_sum_stops_where_a_new_run_cut_the_episode():
    # a second trainer resets the env in the middle of the copies' episodes: the sums of the steps before
    # the cut must not run on into the new episodes
    set_seed(0)
    gamma, n_step = 0.9, 3
    env = wrap_env(lambda: CountingEnv(max_steps=9, leave_at=99), num_envs=2, seed=0)
    agent = build(env, VDN, cfg={"learning_starts": 1000, "n_step": n_step, "batch_size": 8}, memory_size=10)
    for _ in range(2):
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 2, "disable_progressbar": True}).train()
    counters = agent.groups[0].memory.get_tensor_by_name("observations")[:4, 0, 0, 0]
    assert counters.tolist() == [0, 1, 0, 1]  # the cut is there
    indexes = torch.arange(8)
    assert torch.allclose(n_step_targets_at(agent, indexes), walked_n_step_targets(agent, indexes, gamma, n_step),
                          atol=1e-5)


def test_a_replay_memory_without_episode_ends_loads_into_an_n_step_agent_as_one_step_sums(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=9, leave_at=99), num_envs=2, seed=0)
    one_step = build(env, VDN, cfg={"learning_starts": 1000, "batch_size": 8}, memory_size=10)
    one_step.cfg["experiment"]["checkpoint_memory"] = True
    SequentialTrainer(env=env, agents=one_step, cfg={"timesteps": 4, "disable_progressbar": True}).train()
    path = str(tmp_path / "one_step.pt")
    one_step.save(path)
    n_step = build(env, VDN, cfg={"learning_starts": 1000, "batch_size": 8, "n_step": 3}, memory_size=10)
    SequentialTrainer(env=env, agents=n_step, cfg={"timesteps": 1, "disable_progressbar": True}).train()
    n_step.load(path)
    n_step.groups[0].memory.sample_indexes = lambda batch_size: torch.arange(8)
    assert (n_step.sample_batch()[0]["n_step_valid"].sum(1) == 1).all()  # nothing tells where the episodes went on


def test_memory_steps_ahead_wrap_around_and_stop_at_the_newest_step():
    memory = RandomMemory(memory_size=4, num_envs=2)
    memory.create_tensor("x", (1,))
    for _ in range(6):  # steps 0..5 written; step 4 and 5 overwrote positions 0 and 1
        memory.add_samples(x=torch.zeros(2, 1))
    ahead, stored = memory.indexes_ahead(torch.tensor([5, 2, 4]), 3)  # (position 2, copy 1), (1, 0), (2, 0)
    assert ahead.tolist() == [[5, 7, 1], [2, 4, 6], [4, 6, 0]]
    assert stored.tolist() == [[True, True, True], [True, False, False], [True, True, True]]


def test_a_number_of_steps_that_is_not_whole_and_positive_is_named():
    with pytest.raises(ValueError, match=r"n_step.*whole number.*0"):
        build(wrap_env(lambda: CountingEnv(), num_envs=2), VDN, cfg={"n_step": 0})

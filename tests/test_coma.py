"""COMA: a centralised critic of every own action, advantages against the counterfactual baseline."""

import copy

import gymnasium
import pytest
import torch
from helpers import Policy, Value, assert_same_state, box, drive_synthetic, greedy_sampling
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.agents import COMA, COMA_DEFAULT_CONFIG, MFAC
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.resources import KLAdaptiveLR
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space

GAMMA, LAMBDA = 0.9, 0.7
ACTIONS, AGENTS = 5, 3


class AdvantagesOnly(COMA):
    """Computes the advantages and targets at each update but trains nothing (the models stay those of collection)."""

    def update(self, timestep, timesteps):
        self.compute_advantages()


def spread_env(max_cycles=25, continuous=False):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=AGENTS, max_cycles=max_cycles,
                                                          continuous_actions=continuous), num_envs=2, seed=0)


def critic_space(env):
    return joint_space([env.state_space, gymnasium.spaces.Box(0, 1, (ACTIONS * AGENTS + AGENTS,))])


def build(env, directory, *, algorithm=COMA, own_policies=False, own_critics=False, cfg=None):
    uid = env.possible_agents[0]
    shared = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    critic = Value(observation_space=critic_space(env), output_size=ACTIONS)
    models = {u: {"policy": Policy(observation_space=env.observation_space(u), action_space=env.action_space(u))
                  if own_policies else shared,
                  "value": Value(observation_space=critic_space(env), output_size=ACTIONS) if own_critics else critic}
              for u in env.possible_agents}
    config = COMA_DEFAULT_CONFIG.copy()
    config.update({"rollouts": 5, "learning_epochs": 1, "mini_batches": 1, "discount_factor": GAMMA,
                   "gae_lambda": LAMBDA, "value_preprocessor": None, **(cfg or {})})
    config["experiment"]["directory"] = directory
    memories = {u: RandomMemory(memory_size=config["rollouts"], num_envs=env.num_envs) for u in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces, device=env.device, cfg=config)


def collected(tmp_path, **kwargs):
    set_seed(0)
    env = spread_env(max_cycles=3)  # truncated at the third step of the five-step rollout
    agent = build(env, str(tmp_path), algorithm=AdvantagesOnly, **kwargs)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    return agent


def stored(agent, name):
    """``(T, E, agents, ...)`` in agent order (the test's groups hold the agents in that order)."""
    return torch.cat([group.memory.get_tensor_by_name(name) for group in agent.groups], dim=2)


@pytest.mark.parametrize("own_policies", [False, True])
def test_the_advantage_is_the_value_of_the_action_taken_less_the_policy_s_expectation(tmp_path, own_policies):
    agent = collected(tmp_path, own_policies=own_policies)
    critic = agent.groups[0].models["value"].net
    states = agent.groups[0].memory.get_tensor_by_name("states")                    # (T, E, state)
    actions = stored(agent, "actions").squeeze(-1)                                   # (T, E, agents)
    observations = stored(agent, "observations")
    policies = {uid: agent.models[uid]["policy"].net for uid in agent.possible_agents}
    with torch.no_grad():
        for i, uid in enumerate(agent.possible_agents):
            others = torch.nn.functional.one_hot(actions, ACTIONS).float()           # (T, E, agents, actions)
            others[:, :, i] = 0.0                                                    # its own action left out
            agent_id = torch.nn.functional.one_hot(torch.tensor(i), AGENTS).float().expand(*states.shape[:2], AGENTS)
            q = critic(torch.cat([states, others.flatten(2), agent_id], dim=-1))     # (T, E, actions)
            probabilities = torch.softmax(policies[uid](observations[:, :, i]), dim=-1)
            taken = q.gather(-1, actions[:, :, i:i + 1])
            expected = taken - (probabilities * q).sum(-1, keepdim=True)
            assert torch.allclose(stored(agent, "advantages")[:, :, i], expected, atol=1e-5), uid
            assert torch.allclose(stored(agent, "values")[:, :, i], taken, atol=1e-5), uid


def test_the_critic_s_targets_are_the_td_lambda_returns_of_the_actions_taken(tmp_path):
    agent = collected(tmp_path)
    taken, rewards = stored(agent, "values"), stored(agent, "rewards")
    finals, truncated = stored(agent, "final_values"), stored(agent, "truncated").bool()
    assert truncated[2].all() and not truncated[[0, 1, 3]].any()
    last = torch.cat([agent.next_values(group, None, agent._next_states, agent._next_infos) for group in agent.groups],
                     dim=1)
    expected = torch.zeros_like(taken)
    following_return = last
    for t in reversed(range(5)):
        if truncated[t].all():  # G_t = r_t + γ V(final observation)
            expected[t] = rewards[t] + GAMMA * finals[t]
        else:                   # G_t = r_t + γ ((1 − λ) Q_{t+1} + λ G_{t+1})
            next_q = taken[t + 1] if t < 4 else last
            expected[t] = rewards[t] + GAMMA * ((1 - LAMBDA) * next_q + LAMBDA * following_return)
        following_return = expected[t]
    assert torch.allclose(stored(agent, "returns"), expected, atol=1e-5)
    assert torch.allclose(stored(agent, "value_targets"), expected, atol=1e-5)


def test_the_value_after_a_cut_is_the_expected_value_under_the_agent_s_own_policy(tmp_path):
    agent = collected(tmp_path)
    critic = agent.groups[0].models["value"].net
    state_size = agent._next_states.shape[-1]
    with torch.no_grad():  # a critic blind to the other agents' actions: the expectation no longer depends on their draw
        critic[0].weight[:, state_size:state_size + ACTIONS * AGENTS] = 0.0
        present = [torch.ones(2, AGENTS, 1, dtype=torch.bool)]
        values = agent.expected_values(agent._next_observations, agent._next_states, present, None)[0]  # (E, agents, 1)
        for i, uid in enumerate(agent.possible_agents):
            agent_id = torch.nn.functional.one_hot(torch.tensor(i), AGENTS).float().expand(2, AGENTS)
            q = critic(torch.cat([agent._next_states, torch.zeros(2, ACTIONS * AGENTS), agent_id], dim=-1))
            probabilities = torch.softmax(agent.models[uid]["policy"].net(agent._next_observations[uid]), dim=-1)
            assert torch.allclose(values[:, i], (probabilities * q).sum(-1, keepdim=True), atol=1e-5), uid


def test_one_update_trains_the_critic_then_the_actors(tmp_path):
    set_seed(1)
    env = spread_env()
    agent = build(env, str(tmp_path), cfg={"learning_epochs": 3, "mini_batches": 2, "learning_rate": 0.01})
    critic = agent.groups[0].models["value"]
    policy = agent.groups[0].models["policy"]
    before = [p.detach().clone() for p in (*critic.parameters(), *policy.parameters())]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    after = [*critic.parameters(), *policy.parameters()]
    assert all(not torch.equal(b, a) for b, a in zip(before, after))


def test_continuous_actions_are_a_clear_error(tmp_path):
    env = spread_env(continuous=True)
    with pytest.raises(TypeError, match="agent 'agent_0' has the action space Box"):
        build(env, str(tmp_path))


def test_a_critic_per_agent_is_a_clear_error(tmp_path):
    env = spread_env()
    with pytest.raises(ValueError, match="same 'value' model instance"):
        build(env, str(tmp_path), own_critics=True)


def test_a_critic_of_the_wrong_size_names_what_it_must_read(tmp_path):
    env = spread_env()
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    critic = Value(observation_space=env.state_space, output_size=ACTIONS)  # the state alone
    config = COMA_DEFAULT_CONFIG.copy()
    config["rollouts"] = 5
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['value'\]"):
        COMA(possible_agents=env.possible_agents, models={u: {"policy": policy, "value": critic}
                                                          for u in env.possible_agents},
             memories={u: RandomMemory(memory_size=5, num_envs=2) for u in env.possible_agents},
             observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
             state_spaces=env.state_spaces, cfg=config)


def test_an_agent_that_has_left_is_absent_from_the_actions_the_critic_reads(tmp_path):
    agent = collected(tmp_path)
    actions = [torch.tensor([[[3], [1], [4]]])]                 # one sample, the group of three agents
    active = [torch.tensor([[[True], [False], [True]]])]          # agent_1 has left: its stored action is stale
    joint = agent.joint_actions(actions, active)
    expected = torch.zeros(1, ACTIONS * AGENTS)
    expected[0, 3] = expected[0, 2 * ACTIONS + 4] = 1.0
    assert torch.equal(joint, expected)


def counting_coma(env, directory, algorithm):
    """``algorithm`` (COMA or a subclass) on the counting task (3 agents, 4 actions), after one 5-step episode."""
    critic = Value(observation_space=joint_space([env.state_space, gymnasium.spaces.Box(0, 1, (4 * 3 + 3,))]),
                   output_size=4)
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    config = COMA_DEFAULT_CONFIG.copy()
    config.update({"rollouts": 10, "value_preprocessor": None})
    config["experiment"]["directory"] = directory
    agent = algorithm(possible_agents=env.possible_agents,
                      models={u: {"policy": policy, "value": critic} for u in env.possible_agents},
                      memories={u: RandomMemory(memory_size=10, num_envs=2) for u in env.possible_agents},
                      observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                      state_spaces=env.state_spaces, cfg=config)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    return agent


class JointActionSpy(COMA):
    """Keeps the presence of the agents each joint action was built with."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.presence = []

    def joint_actions(self, actions, active):
        self.presence.append(torch.cat(active, dim=1).clone())
        return super().joint_actions(actions, active)


def test_a_truncated_episode_s_end_is_valued_with_the_agents_present_at_it_not_those_of_the_next_episode(tmp_path):
    set_seed(4)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)  # agent_1 leaves after step 3
    agent = counting_coma(env, str(tmp_path), JointActionSpy)
    (at_the_end,) = agent.presence  # built once, for the final observations of the truncated episodes
    assert at_the_end[:, 1].logical_not().all(), "agent_1 had left: it is no part of the final joint action"
    assert at_the_end[:, [0, 2]].all()


class ExpectationSpy(COMA):
    """Keeps the action masks each expectation of Q was taken with."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.masks = []

    def expected_values(self, observations, states, active, masks):
        self.masks.append(None if masks is None else torch.cat(masks, dim=1).clone())
        return super().expected_values(observations, states, active, masks)


def test_a_truncated_episode_s_end_is_valued_with_the_action_masks_of_its_final_observations(tmp_path):
    set_seed(5)
    # action 0 is illegal on odd steps: legal at a new episode's first observation, illegal at the final one (step 5)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99, masked=True), num_envs=2, seed=0)
    agent = counting_coma(env, str(tmp_path), ExpectationSpy)
    (final_masks,) = agent.masks
    assert not final_masks[..., 0].any() and final_masks[..., 1:].all()


def test_a_kl_adaptive_learning_rate_is_refused_since_coma_measures_no_kl(tmp_path):
    with pytest.raises(ValueError, match="KLAdaptiveLR"):
        build(spread_env(), str(tmp_path), cfg={"learning_rate_scheduler": KLAdaptiveLR})


# ----------------------------------------------------------------------------- stacked policies, synthetic runs
SYNTHETIC_AGENTS = ["a0", "a1", "a2"]


def synthetic_pair(tmp_path, algorithm=COMA, cfg=None):
    """A COMA (or MFAC) with the agents' own policies stacked and one with them separate, from the same models
    (4-feature observations, 3 actions, a 6-feature state, 2 env copies, one shared critic)."""
    discrete = gymnasium.spaces.Discrete(3)
    critic_inputs = 4 + 3 if algorithm is MFAC else 6 + 3 * 3 + 3
    set_seed(0)
    critic = Value(observation_space=box(critic_inputs), output_size=3)
    models = {u: {"policy": Policy(observation_space=box(4), action_space=discrete), "value": critic}
              for u in SYNTHETIC_AGENTS}
    agents = []
    for stack_models, copied in ((True, models), (False, copy.deepcopy(models))):
        config = algorithm.DEFAULT_CONFIG.copy()
        config.update({"rollouts": 4, "learning_epochs": 2, "mini_batches": 2, "stack_models": stack_models,
                       **(cfg or {})})
        config["experiment"].update(directory=str(tmp_path), checkpoint_interval=0, tensorboard=False, csv=False)
        agents.append(algorithm(possible_agents=SYNTHETIC_AGENTS, models=copied, cfg=config,
                                memories={u: RandomMemory(memory_size=4, num_envs=2) for u in SYNTHETIC_AGENTS},
                                observation_spaces={u: box(4) for u in SYNTHETIC_AGENTS},
                                action_spaces={u: discrete for u in SYNTHETIC_AGENTS},
                                state_spaces={u: box(6) for u in SYNTHETIC_AGENTS}))
    return agents


@pytest.mark.parametrize("algorithm", ["COMA", "MFAC"])
def test_stacked_policies_train_the_shared_critic_as_separate_ones_with_agents_active_on_different_steps(
        tmp_path, monkeypatch, algorithm):
    """a1 leaves one copy after 2 steps, a2 both after 1: each agent's critic loss is its own mean, as if alone."""
    greedy_sampling(monkeypatch)

    def active(t):
        return {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.tensor([[True], [t < 2]]),
                "a2": torch.full((2, 1), t < 1)}

    stacked, separate = synthetic_pair(tmp_path, {"COMA": COMA, "MFAC": MFAC}[algorithm])
    assert len(stacked.groups) == 1 and stacked.groups[0].model_sets == 3 and len(separate.groups) == 3
    for agent in (stacked, separate):
        set_seed(1)
        drive_synthetic(agent, 4, SYNTHETIC_AGENTS, active=active)
    assert_same_state(stacked, separate, atol=1e-6, rtol=1e-6)

import numpy as np
import pytest
import torch
from toy_envs import ContinuousEnv, CountingEnv

from marlparts.agents import MADDPG, MADDPG_DEFAULT_CONFIG, MATD3, MATD3_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, Model, mlp
from marlparts.resources import GaussianNoise, OrnsteinUhlenbeckNoise, linear_scale
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space


class Net(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(16,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class RecordingCritic(Net):
    """Remembers the last input it was given."""

    def compute(self, inputs, role=""):
        self.last_input = inputs["observations"].detach().clone()
        return super().compute(inputs, role)


def build(env, *, algorithm=MADDPG, share=True, cfg=None, memory_size=64, critic_class=Net, policy_groups=None,
          critic_outputs=None):
    uids = env.possible_agents
    critic_space = joint_space([*env.observation_spaces.values(), *env.action_spaces.values()])
    roles = ("critic", "critic_2") if algorithm is MATD3 else ("critic",)
    out = env.action_space(uids[0]).n if hasattr(env.action_space(uids[0]), "n") else env.action_space(uids[0]).shape[0]
    if policy_groups is None:
        policy_groups = [uids] if share else [[u] for u in uids]
    models = {}
    critics = {role: critic_class(observation_space=critic_space, output_size=critic_outputs or len(uids))
               for role in roles}
    for group in policy_groups:
        policy = Net(observation_space=env.observation_space(group[0]), output_size=out)
        for uid in group:
            models[uid] = {"policy": policy, **critics}
    base = (MATD3_DEFAULT_CONFIG if algorithm is MATD3 else MADDPG_DEFAULT_CONFIG).copy()
    base.update(batch_size=8, learning_starts=4)
    base["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    for key, value in (cfg or {}).items():
        base[key] = value
    memories = {u: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for u in uids}
    return algorithm(possible_agents=uids, models=models, memories=memories, observation_spaces=env.observation_spaces,
                     action_spaces=env.action_spaces, state_spaces=env.state_spaces, cfg=base)


def run(agent, env, steps):
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()


@pytest.mark.parametrize("algorithm", [MADDPG, MATD3])
def test_discrete_actions_masked_by_the_env_are_never_taken_targeted_nor_improved_towards(algorithm):
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=6, leave_at=99, masked=True), num_envs=4, seed=0)
    agent = build(env, algorithm=algorithm, cfg={"learning_starts": 4, "random_timesteps": 2})
    with torch.no_grad():  # the policy prefers action 0, which the env forbids on odd steps
        agent.models["agent_0"]["policy"].net[-1].bias[0] += 20.0
    critic_inputs = []  # every (joint observations, joint one-hot actions) a critic valued: stored, target, own
    original = agent.q_values

    def recording(critic, observations, actions, columns):
        critic_inputs.append((observations.detach(), actions.detach()))
        return original(critic, observations, actions, columns)

    agent.q_values = recording
    run(agent, env, 30)
    assert agent.gradient_step > 0 and critic_inputs
    for observations, actions in critic_inputs:
        odd_step = observations[:, 0] % 2 == 1  # agent_0's step counter; every agent's mask is alike
        assert odd_step.any()
        assert not actions.unflatten(1, (3, 4))[odd_step][..., 0].any()
    for player in (agent, agent.frozen_copy()):  # greedy, as an evaluation or a frozen opponent plays
        player.set_mode("eval")
        observations, infos = env.reset()
        for _ in range(4):
            actions = player.act(observations, env.state(), infos, 0, 1)
            for uid in env.possible_agents:
                assert infos["action_mask"][uid].gather(1, actions[uid].long()).all()
            observations, _, _, _, infos = env.step(actions)


class NoActionsOnceGone(CountingEnv):
    """CountingEnv(masked=True) where an agent whose episode ends is shown a mask with no legal action."""

    def step(self, actions):
        observations, rewards, terminated, truncated, infos = super().step(actions)
        for uid in observations:
            if terminated[uid] or truncated[uid]:
                observations[uid]["action_mask"] = np.zeros(4, dtype=np.int8)
        return observations, rewards, terminated, truncated, infos


@pytest.mark.parametrize("algorithm", [MADDPG, MATD3])
def test_a_final_mask_with_no_legal_action_leaves_the_targets_finite_below_a_gumbel_temperature_of_one(algorithm):
    set_seed(0)
    env = wrap_env(lambda: NoActionsOnceGone(max_steps=6, leave_at=3, masked=True), num_envs=4, seed=0)
    agent = build(env, algorithm=algorithm, cfg={"gumbel_temperature": 0.5, "learning_starts": 4})
    losses = []
    original = agent.gradient_update
    agent.gradient_update = lambda batches: losses.append(original(batches)) or losses[-1]
    run(agent, env, 40)
    assert not agent.groups[0].memory.get_tensor_by_name("next_action_mask").any(-1).all()  # such masks were stored
    assert losses and all(torch.isfinite(value).all() for step in losses for value in step.values())
    assert all(torch.isfinite(parameter).all() for parameter in agent.models["agent_0"]["policy"].parameters())


def test_a_subclass_whose_target_actions_takes_no_mask_trains_where_the_env_has_no_masks():
    class ClampedTargets(MADDPG):
        def target_actions(self, group, next_observations):
            actions, log_prob = super().target_actions(group, next_observations)
            return actions.clamp(-0.5, 0.5), log_prob

    env = wrap_env(lambda: ContinuousEnv(max_steps=6), num_envs=2, seed=0)
    agent = build(env, algorithm=ClampedTargets)
    run(agent, env, 10)
    assert agent.gradient_step > 0


def test_truncated_transitions_store_the_final_observation_and_do_not_count_as_terminal():
    env = wrap_env(lambda: CountingEnv(max_steps=2, leave_at=99), num_envs=2, seed=0)
    agent = build(env)
    run(agent, env, 2)
    memory = agent.groups[0].memory
    next_obs = memory.get_tensor_by_name("next_observations")
    assert next_obs[1, 0, 1, 0].item() == 2.0  # the final observation (step 2), not the reset one (step 0)
    assert not memory.get_tensor_by_name("terminated")[1].any()


def test_target_values_bootstrap_unless_terminated():
    env = wrap_env(lambda: ContinuousEnv(max_steps=4, leave_at=2), num_envs=1, seed=0)
    agent = build(env, cfg={"discount_factor": 0.5})  # continuous: the target actions are deterministic
    run(agent, env, 4)
    batches = [{name: t for name, t in zip(
        ["observations", "next_observations", "actions", "rewards", "terminated", "active"],
        agent.groups[0].memory.sample_by_index(
            ["observations", "next_observations", "actions", "rewards", "terminated", "active"], torch.arange(4)))}]
    targets = agent.target_values(batches)[0]
    terminated = batches[0]["terminated"].squeeze(-1)
    assert terminated[1, 1] and terminated.sum() == 1  # agent_1 terminated on step 2 (index 1)
    rewards = batches[0]["rewards"].squeeze(-1)
    with torch.no_grad():
        next_actions = agent.joint([agent.target_actions(agent.groups[0], batches[0]["next_observations"])[0]])
        next_q = agent.next_q_values(agent.groups[0], agent.critic_observations(batches, "next_observations"),
                                     next_actions)
    assert torch.allclose(targets, rewards + 0.5 * (~terminated) * next_q)
    assert targets[1, 1] == rewards[1, 1]


def test_critic_reads_every_agents_action_in_agent_order():
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=1, seed=0)
    # agent_0 and agent_2 share a policy, agent_1 has its own: groups are [0, 2] and [1]
    agent = build(env, critic_class=RecordingCritic, policy_groups=[["agent_0", "agent_2"], ["agent_1"]])
    assert [g.uids for g in agent.groups] == [["agent_0", "agent_2"], ["agent_1"]]
    run(agent, env, 4)
    names = ["observations", "next_observations", "actions", "rewards", "terminated", "active"]
    batches = [dict(zip(names, g.memory.sample_by_index(names, torch.arange(4)))) for g in agent.groups]
    agent.critic_loss(batches, [torch.zeros(4, 2), torch.zeros(4, 1)])
    critic = agent.groups[0].models["critic"]
    observations, actions = critic.last_input[:, :9], critic.last_input[:, 9:]
    # observations are [step, agent index, last action] per agent: the agent index column reads 0, 1, 2
    assert observations[:, [1, 4, 7]].tolist() == [[0.0, 1.0, 2.0]] * 4
    stored = {uid: None for uid in env.possible_agents}
    stored["agent_0"], stored["agent_2"] = batches[0]["actions"][:, 0, 0], batches[0]["actions"][:, 1, 0]
    stored["agent_1"] = batches[1]["actions"][:, 0, 0]
    expected = torch.cat([torch.nn.functional.one_hot(stored[uid], 4).float() for uid in env.possible_agents], dim=1)
    assert torch.equal(actions, expected)


def test_polyak_update_of_all_targets():
    env = wrap_env(lambda: CountingEnv(), num_envs=1, seed=0)
    agent = build(env, cfg={"polyak": 0.25})
    for model in agent.distinct_models():
        for p in model.parameters():
            p.data.add_(1.0)
    before = {record.name: [p.clone() for p in record.target.parameters()] for record in agent.trained}
    agent.update_targets()
    for record in agent.trained:
        for target, old, source in zip(record.target.parameters(), before[record.name], record.model.parameters()):
            assert torch.allclose(target, 0.75 * old + 0.25 * source)


def test_gumbel_softmax_is_one_hot_forward_with_gradient_backward():
    env = wrap_env(lambda: CountingEnv(), num_envs=1, seed=0)
    agent = build(env)
    logits = torch.randn(64, 3, 4, requires_grad=True)
    actions = agent.differentiable_actions(agent.groups[0], logits)
    assert torch.all(actions.sum(-1) == 1) and set(actions.unique().tolist()) == {0.0, 1.0}
    (actions * torch.arange(4.0)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_noise_schedules():
    assert linear_scale(0, initial_scale=1.0, final_scale=0.1, timesteps=10) == 1.0
    assert linear_scale(5, initial_scale=1.0, final_scale=0.1, timesteps=10) == pytest.approx(0.55)
    assert linear_scale(50, initial_scale=1.0, final_scale=0.1, timesteps=10) == pytest.approx(0.1)
    assert linear_scale(50, initial_scale=0.3, final_scale=0.1, timesteps=None) == 0.3
    torch.manual_seed(0)
    assert GaussianNoise(std=0.5).sample((20000,)).std().item() == pytest.approx(0.5, rel=0.05)
    ou = OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2)
    samples = torch.stack([ou.sample((2, 3)) for _ in range(200)])
    lag1 = torch.corrcoef(torch.stack([samples[:-1].flatten(), samples[1:].flatten()]))[0, 1]
    assert lag1 > 0.7  # temporally correlated
    ou.reset(torch.tensor([True, False]))
    assert torch.all(ou.state[0] == 0) and not torch.all(ou.state[1] == 0)


def test_continuous_exploration_stays_in_the_box_and_eval_is_greedy():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=4, seed=0)
    agent = build(env, share=True, cfg={"exploration": {"noise": GaussianNoise, "noise_kwargs": {"std": 5.0},
                                                        "initial_scale": 1.0, "final_scale": 1.0, "timesteps": None}})
    obs, infos = env.reset()
    actions = agent.act(obs, env.state(), infos, 0, 1)
    assert all(a.abs().max() <= 1.0 for a in actions.values())
    agent.set_mode("eval")
    first, second = agent.act(obs, env.state(), infos, 0, 1), agent.act(obs, env.state(), infos, 0, 1)
    assert all(torch.equal(first[u], second[u]) for u in env.possible_agents)
    run(agent, env, 8)  # the ContinuousEnv asserts that every action it receives is inside the Box


def test_discrete_space_without_gumbel_softmax_is_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=1)
    with pytest.raises(ValueError, match=r"agent_0.*Discrete.*gumbel_softmax"):
        build(env, cfg={"gumbel_softmax": False})


def test_critic_of_the_wrong_size_is_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=1)
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['critic'\].*returns \(1,\).*expected 3"):
        build(env, critic_outputs=1)


def test_memory_smaller_than_the_batch_is_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=1)
    with pytest.raises(ValueError, match=r"memories\['agent_0'\].*4 x 1.*batch_size'\] = 8"):
        build(env, memory_size=4)


def test_matd3_uses_the_smaller_twin_and_delays_the_actor():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env, algorithm=MATD3, cfg={"policy_delay": 2})
    group = agent.groups[0]
    x, actions = torch.randn(5, 9), torch.rand(5, 6)
    with torch.no_grad():
        q1 = agent.q_values(group.trained["critic"].target, x, actions, agent.critic_columns[(0, "critic")])
        q2 = agent.q_values(group.trained["critic_2"].target, x, actions, agent.critic_columns[(0, "critic_2")])
        assert torch.equal(agent.next_q_values(group, x, actions), torch.min(q1, q2))
    run(agent, env, 4)  # fills the memory up to learning_starts, with one update at step 4
    policy = group.models["policy"]
    for _ in range(4):
        before = [p.clone() for p in policy.parameters()]
        agent.update(0, 1)
        moved = any(not torch.equal(b, p) for b, p in zip(before, policy.parameters()))
        assert moved == (agent.gradient_step % 2 == 0), agent.gradient_step


def test_save_and_load_restore_models_targets_and_greedy_actions(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env)
    run(agent, env, 8)
    agent.save(str(tmp_path / "maddpg.pt"))
    fresh = build(env)
    fresh.load(str(tmp_path / "maddpg.pt"))
    obs, infos = env.reset()
    agent.set_mode("eval")
    fresh.set_mode("eval")
    a, b = agent.act(obs, env.state(), infos, 0, 1), fresh.act(obs, env.state(), infos, 0, 1)
    assert all(torch.equal(a[u], b[u]) for u in env.possible_agents)
    for record, fresh_record in zip(agent.trained, fresh.trained):
        assert torch.equal(torch.cat([p.flatten() for p in record.target.parameters()]),
                           torch.cat([p.flatten() for p in fresh_record.target.parameters()]))


def test_matd3_runs_on_both_action_kinds():
    from spread_agents import make_spread_agent, make_spread_env

    for discrete in (False, True):
        env = make_spread_env(2, continuous=not discrete)
        agent = make_spread_agent("matd3", env, "runs/unused", batch_size=16, learning_starts=8, update_interval=1,
                                  experiment={"tensorboard": False, "csv": False, "checkpoint_interval": 0})
        run(agent, env, 12)
        assert agent.gradient_step == 5


def test_actor_step_leaves_the_critics_trainable_and_unchanged():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env)
    run(agent, env, 4)
    critic = agent.groups[0].models["critic"]
    before = [p.clone() for p in critic.parameters()]
    agent.optimize([record for record in agent.trained if record.role == "policy"], agent.actor_loss(agent.sample_batch()))
    assert all(torch.equal(b, p) for b, p in zip(before, critic.parameters()))
    agent.update(0, 1)
    assert all(p.requires_grad for p in critic.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, critic.parameters()))


def test_learning_starts_and_update_interval_count_stored_steps_across_train_calls():
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env, cfg={"learning_starts": 6, "update_interval": 2})
    run(agent, env, 5)  # 5 steps stored: none of them an update step
    assert agent.gradient_step == 0
    run(agent, env, 5)  # steps 6..10: updates after steps 6, 8 and 10
    assert agent.recorded_steps == 10 and agent.gradient_step == 3


@pytest.mark.parametrize("noise_kwargs", [{}, {"theta": 0.3, "sigma": 0.1}])
def test_ornstein_uhlenbeck_noise_through_the_config_with_shared_models(noise_kwargs):
    env = wrap_env(lambda: ContinuousEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    cfg = MADDPG_DEFAULT_CONFIG.copy()["exploration"]
    cfg.update(noise=OrnsteinUhlenbeckNoise, noise_kwargs=noise_kwargs)
    agent = build(env, share=True, cfg={"exploration": cfg})
    noise = agent.groups[0].noise
    assert isinstance(noise, OrnsteinUhlenbeckNoise)
    if noise_kwargs:
        assert (noise.theta, noise.sigma) == (0.3, 0.1)
    run(agent, env, 7)  # two episode ends: the noise restarts for the copies that ended
    assert noise.state.shape == (2, 3, 2)


def test_an_agent_that_left_earlier_stores_no_observation_of_the_next_episode():
    # agent_1 leaves at step 2; the copy ends at step 4 and resets
    env = wrap_env(lambda: ContinuousEnv(max_steps=4, leave_at=2), num_envs=1, seed=0)
    agent = build(env, cfg={"learning_starts": 100})
    run(agent, env, 4)
    next_obs = agent.groups[0].memory.get_tensor_by_name("next_observations")
    assert torch.all(next_obs[3, 0, 1] == 0), next_obs[3, 0, 1]  # not agent_1's reset observation [0, 1, 0]
    assert next_obs[3, 0, 0, 0] == 4.0  # agent_0: its final observation


@pytest.mark.parametrize("algorithm", [MADDPG, MATD3])
def test_checkpoint_holds_the_step_counters_noise_schedule_and_optionally_the_replay(tmp_path, algorithm):
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    exploration = {"noise": OrnsteinUhlenbeckNoise, "noise_kwargs": {}, "initial_scale": 1.0, "final_scale": 0.1,
                   "timesteps": 20}
    cfg = {"random_timesteps": 3, "exploration": exploration, "policy_delay": 2} if algorithm is MATD3 else \
        {"random_timesteps": 3, "exploration": exploration}
    agent = build(env, algorithm=algorithm, cfg=cfg)
    run(agent, env, 9)  # updates after steps 4..9: six gradient steps, an odd number of actor steps for MATD3
    assert agent.gradient_step == 6
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    fresh = build(env, algorithm=algorithm, cfg=cfg)
    fresh.load(path)
    assert (fresh.recorded_steps, fresh.gradient_step) == (9, 6)
    assert len(fresh.groups[0].memory) == 0  # the replay memory is left out unless asked for
    assert torch.equal(fresh.groups[0].noise.state, agent.groups[0].noise.state)

    agent.cfg["experiment"]["checkpoint_memory"] = True
    agent.save(path)
    with_replay = build(env, algorithm=algorithm, cfg=cfg)
    with_replay.load(path)
    assert len(with_replay.groups[0].memory) == 9 * 2
    names = ["observations", "actions", "rewards"]
    for a, b in zip(agent.groups[0].memory.sample_by_index(names, torch.arange(18)),
                    with_replay.groups[0].memory.sample_by_index(names, torch.arange(18))):
        assert torch.equal(a, b)


def test_per_agent_gumbel_temperature_is_used():
    env = wrap_env(lambda: CountingEnv(), num_envs=2, seed=0)
    temperatures = {"agent_0": 0.5, "agent_1": 2.0, "agent_2": 0.5}
    agent = build(env, policy_groups=[["agent_0", "agent_2"], ["agent_1"]], cfg={"gumbel_temperature": temperatures})
    seen = []
    original = torch.nn.functional.gumbel_softmax
    torch.nn.functional.gumbel_softmax = lambda logits, tau, hard: seen.append(tau) or original(logits, tau=tau, hard=hard)
    try:
        run(agent, env, 6)
    finally:
        torch.nn.functional.gumbel_softmax = original
    assert set(seen) == {0.5, 2.0}


def test_a_run_resumed_without_its_replay_waits_for_learning_starts_again(tmp_path):
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env, cfg={"learning_starts": 5})
    run(agent, env, 8)
    agent.save(str(tmp_path / "agent.pt"))
    fresh = build(env, cfg={"learning_starts": 5})
    fresh.load(str(tmp_path / "agent.pt"))
    steps_before = fresh.gradient_step
    run(fresh, env, 4)  # 4 steps stored again: fewer than learning_starts
    assert fresh.gradient_step == steps_before
    run(fresh, env, 1)
    assert fresh.gradient_step == steps_before + 1


def test_sampled_evaluation_leaves_the_training_noise_alone():
    env = wrap_env(lambda: ContinuousEnv(max_steps=50), num_envs=2, seed=0)
    exploration = {"noise": OrnsteinUhlenbeckNoise, "noise_kwargs": {}, "initial_scale": 1.0, "final_scale": 1.0,
                   "timesteps": None}
    agent = build(env, cfg={"exploration": exploration, "learning_starts": 100})
    run(agent, env, 3)
    state = agent.groups[0].noise.state.clone()
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"eval_actions": "sampled", "eval_num_envs": 1,
                                                            "disable_progressbar": True})
    trainer.eval(episodes=1)
    assert torch.equal(agent.groups[0].noise.state, state)


def test_choosing_another_noise_class_drops_the_default_noise_arguments():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env, cfg={"exploration": {"noise": OrnsteinUhlenbeckNoise}})
    assert isinstance(agent.groups[0].noise, OrnsteinUhlenbeckNoise)


def test_with_own_actions_places_each_agents_action_in_its_own_row():
    from marlparts.utils import with_own_actions

    joint = torch.arange(2 * 7, dtype=torch.float32).reshape(2, 7)  # 3 agents with widths 2, 3, 2
    own = torch.full((2, 2, 2), -1.0, requires_grad=True)  # a group of agents 0 and 2 (width 2, offsets 0 and 5)
    replaced = with_own_actions(joint, own * torch.tensor([1.0, 2.0]).reshape(1, 2, 1), [0, 5])
    assert replaced.shape == (2, 2, 7)
    assert replaced[0, 0].tolist() == [-1, -1, 2, 3, 4, 5, 6]       # agent 0's row: its columns replaced
    assert replaced[0, 1].tolist() == [0, 1, 2, 3, 4, -2, -2]       # agent 2's row: its columns replaced
    replaced.sum().backward()
    assert own.grad.tolist() == [[[1, 1], [2, 2]]] * 2


def test_hard_target_updates_every_interval():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    agent = build(env, cfg={"polyak": 1.0, "target_update_interval": 3, "learning_starts": 1000})
    run(agent, env, 4)
    record = agent.trained[0]
    for step in range(1, 7):
        with torch.no_grad():
            for p in record.model.parameters():
                p.add_(1.0)
        agent.gradient_step = step
        agent.update_targets()
        same = all(torch.equal(t, p) for t, p in zip(record.target.parameters(), record.model.parameters()))
        assert same == (step % 3 == 0), step


def test_n_step_returns_are_refused_where_the_targets_are_one_step():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2)
    with pytest.raises(ValueError, match=r"MADDPG.*n_step.*QMIX and VDN"):
        build(env, cfg={"n_step": 3})


def test_a_sampled_evaluation_with_ornstein_uhlenbeck_noise_repeats_itself():
    """The evaluation's noise process starts afresh at every evaluation, as its env copies do: two sampled
    evaluations of the same agent give the same episodes."""
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    exploration = {"noise": OrnsteinUhlenbeckNoise, "noise_kwargs": {}, "initial_scale": 1.0, "final_scale": 1.0,
                   "timesteps": None}
    agent = build(env, cfg={"exploration": exploration, "learning_starts": 100})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"eval_actions": "sampled", "eval_num_envs": 2,
                                                           "disable_progressbar": True})
    first, second = trainer.eval(episodes=4), trainer.eval(episodes=4)
    assert first["teams"] == second["teams"]


def test_the_evaluation_noise_restarts_in_a_copy_whose_episode_ended_and_goes_on_in_the_others():
    """A random walk (theta 0) through a policy that outputs zeros: the actions are the walk itself. Where the
    step's infos say a copy's episode ended, its walk starts again from the mean."""
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    exploration = {"noise": OrnsteinUhlenbeckNoise, "noise_kwargs": {"theta": 0.0, "sigma": 0.01},
                   "initial_scale": 1.0, "final_scale": 1.0, "timesteps": None}
    agent = build(env, cfg={"exploration": exploration, "learning_starts": 100})
    agent.init()
    with torch.no_grad():
        for model in agent.distinct_models():
            for parameter in model.parameters():
                parameter.zero_()
    agent.set_mode("eval")
    agent.stochastic_evaluation = True  # sampled evaluation
    observations, infos = env.reset(seed=0)
    going_on = {"episode_end": torch.tensor([False, False])}
    with torch.no_grad():  # as the trainer acts
        before = [agent.act(observations, None, going_on, 0, 1)[env.possible_agents[0]] for _ in range(3)][-1]
        torch.manual_seed(5)
        ended = {"episode_end": torch.tensor([True, False])}
        after = agent.act(observations, None, ended, 0, 1)[env.possible_agents[0]]
    torch.manual_seed(5)
    increments = 0.01 * torch.randn(2, len(env.possible_agents), 2)[:, 0]  # (copies, agents, action): the first agent
    assert after[0] == pytest.approx(increments[0].tolist(), abs=1e-6)  # restarted from 0
    assert after[1] == pytest.approx((before[1] + increments[1]).tolist(), abs=1e-6)  # went on


def test_an_agent_in_eval_mode_acts_on_another_number_of_copies_with_its_evaluation_noise():
    exploration = {"noise": OrnsteinUhlenbeckNoise, "noise_kwargs": {}, "initial_scale": 1.0, "final_scale": 1.0,
                   "timesteps": None}
    envs = [wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=copies, seed=0) for copies in (2, 1)]
    agent = build(envs[0], cfg={"exploration": exploration, "learning_starts": 100})
    agent.init()
    agent.set_mode("eval")
    agent.stochastic_evaluation = True
    with torch.no_grad():
        for env in envs:
            observations, infos = env.reset(seed=0)
            actions = agent.act(observations, None, infos, 0, 1)
            assert actions[env.possible_agents[0]].shape[0] == env.num_envs

"""The PPO update works in the units the rollout was collected in: value normalisation, clipped
actions, and preprocessor statistics that count only active steps.
"""

import pytest
import torch
from helpers import Policy, Value, build_mappo
from mpe2 import simple_spread_v3
from toy_envs import ContinuousEnv, CountingEnv

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.agents.common.losses import masked_mean
from marlparts.agents.ppo.advantages import compute_gae
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import GaussianMixin, Model, SquashedGaussianMixin, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import Callback, SequentialTrainer
from marlparts.utils import set_seed, stack_agents


def spread(num_envs=8):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=num_envs, seed=0)


def shared_critic_mappo(env, tmp_path, rollouts, stack_models=False):
    """Separate policies and one critic shared by every agent: one group per agent (or, with
    ``stack_models``, one group whose policies are stacked and whose critic is the shared one).
    """
    value = Value(observation_space=env.state_space, output_size=env.num_agents)
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": value} for uid in env.possible_agents}
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=rollouts, learning_epochs=2, mini_batches=2, stack_models=stack_models)
    cfg["experiment"].update(directory=str(tmp_path), tensorboard=False, checkpoint_interval=0)
    return MAPPO(possible_agents=env.possible_agents, models=models,
                 memories={uid: RandomMemory(memory_size=rollouts, num_envs=env.num_envs) for uid in env.possible_agents},
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                 state_spaces=env.state_spaces, cfg=cfg)


def watch_first_minibatch(agent):
    """For each update: the value normaliser's statistics at collection time, and for each group the
    losses of the first minibatch of epoch 0 with the critic's predictions and the samples' indexes.
    """
    records = []
    normaliser = agent.value_normaliser(agent.groups[0])
    original_update, original_predict, original_losses = agent.update, agent.predict_values, agent.group_losses

    def update(*args):
        records.append({"mean": normaliser.running_mean.clone().float(),
                        "std": (normaliser.running_variance + normaliser.epsilon).sqrt().float(), "groups": []})
        original_update(*args)

    def predict(group, observations, states, inputs=None):
        predicted, outputs = original_predict(group, observations, states, inputs)
        if records and torch.is_grad_enabled():
            records[-1]["predicted"] = predicted.detach().clone()
        return predicted, outputs

    def group_losses(group, indexes):
        losses = original_losses(group, indexes)
        if len(records[-1]["groups"]) < len(agent.groups):
            records[-1]["groups"].append({"losses": losses, "predicted": records[-1]["predicted"], "indexes": indexes})
        return losses

    agent.update, agent.predict_values, agent.group_losses = update, predict, group_losses
    return records


def assert_first_value_loss_is_unclipped_in_collection_units(agent, records):
    """At the first minibatch the critic still predicts the stored old values, so the clipped branch of
    the value loss equals the unclipped one, with targets standardised by the statistics of collection time.
    """
    assert records
    for record in records:
        for group, first in zip(agent.groups, record["groups"]):
            returns = group.memory.get_tensor_by_name("returns").flatten(0, 1)[first["indexes"]]
            active = group.memory.get_tensor_by_name("active").flatten(0, 1)[first["indexes"]]
            targets = ((returns - record["mean"]) / record["std"]).clamp(-5.0, 5.0)
            error = (first["predicted"] - targets).square()
            expected = (error * active).sum() / active.sum()
            assert torch.allclose(first["losses"]["value"], expected, rtol=1e-4), (first["losses"]["value"], expected)


def test_value_normalisation_leaves_the_first_minibatch_at_the_old_values(tmp_path):
    set_seed(0)
    env = spread()
    agent = build_mappo(env, rollouts=25, directory=str(tmp_path), cfg={"learning_epochs": 2, "mini_batches": 2})
    records = watch_first_minibatch(agent)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 75, "disable_progressbar": True}).train()
    assert len(records) == 3
    assert_first_value_loss_is_unclipped_in_collection_units(agent, records[-1:])


def test_a_critic_shared_by_several_groups_bootstraps_with_the_statistics_of_its_stored_values(tmp_path):
    set_seed(0)
    env = spread()
    agent = shared_critic_mappo(env, tmp_path, rollouts=20)  # episodes of 25 steps: rollouts end mid-episode
    assert len(agent.groups) == 3
    records = watch_first_minibatch(agent)
    gae_inputs = []
    original_advantages = agent.compute_advantages

    def compute_advantages():
        normaliser = agent.value_normaliser(agent.groups[0])
        last = []
        with torch.no_grad():
            for group in agent.groups:
                next_obs = stack_agents(agent._next_observations, group.uids)
                last.append(normaliser(agent.predict_values(group, next_obs, agent._next_states)[0], inverse=True))
        gae_inputs.append(last)
        original_advantages()

    agent.compute_advantages = compute_advantages
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 40, "disable_progressbar": True}).train()
    assert_first_value_loss_is_unclipped_in_collection_units(agent, records[-1:])
    # the returns of every group bootstrap from the value of the next observation in the stored values' units
    for group, last_values in zip(agent.groups, gae_inputs[-1]):
        memory = group.memory
        _, returns = compute_gae(rewards=memory.get_tensor_by_name("rewards"), values=memory.get_tensor_by_name("values"),
                                 terminated=memory.get_tensor_by_name("terminated"),
                                 truncated=memory.get_tensor_by_name("truncated"),
                                 final_values=memory.get_tensor_by_name("final_values"), last_values=last_values,
                                 discount_factor=0.99, gae_lambda=0.95)
        assert torch.allclose(memory.get_tensor_by_name("returns"), returns, atol=1e-5)


class ClippedGaussian(GaussianMixin, Model):
    clip_actions = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(16,))
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))  # std 1 on a [-1, 1] Box: many clipped

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class SquashedGaussian(SquashedGaussianMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(16,))
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


@pytest.mark.parametrize("policy_class", [ClippedGaussian, SquashedGaussian])
def test_bounded_gaussian_actions_start_the_update_at_kl_zero(tmp_path, policy_class):
    """PPO re-evaluates the stored actions at the update: with a policy whose env actions are a changed
    sample (clipped, or squashed by tanh), the stored sample must be the one its log-probability belongs
    to, so the first minibatch's ratio is exactly 1.
    """
    set_seed(0)
    env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=4, seed=0)
    uid = env.possible_agents[0]
    policy = policy_class(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=5, learning_epochs=1, mini_batches=1)
    cfg["experiment"].update(directory=str(tmp_path), tensorboard=False, checkpoint_interval=0)
    agent = IPPO(possible_agents=env.possible_agents, models={u: {"policy": policy, "value": value} for u in env.possible_agents},
                 memories={u: RandomMemory(memory_size=5, num_envs=4) for u in env.possible_agents},
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)
    kls = []
    original = agent.group_losses
    agent.group_losses = lambda group, indexes: kls.append(original(group, indexes)) or kls[-1]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    assert abs(kls[0]["kl"].item()) < 1e-6
    # the env received actions inside the Box (ContinuousEnv asserts it) and the sampled ones were stored
    stored = agent.groups[0].memory.get_tensor_by_name("actions")
    assert stored.abs().max() > 1.0


def test_inactive_steps_stay_out_of_the_preprocessor_statistics(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=6, leave_at=2), num_envs=2, seed=0)
    agent = build_mappo(env, rollouts=6, directory=str(tmp_path), algorithm="ippo",
                        cfg={"observation_preprocessor": RunningStandardScaler, "state_preprocessor": RunningStandardScaler,
                             "learning_epochs": 1, "mini_batches": 1})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    active = memory.get_tensor_by_name("active").squeeze(-1)
    observations = memory.get_tensor_by_name("observations")[active]
    assert active.sum() == 6 * 2 * 3 - 4 * 2  # agent_1 acts at two of the six steps of each copy
    group = agent.groups[0]
    for scaler in (agent.observation_preprocessor(group), agent.state_preprocessor(group)):
        assert float(scaler.current_count) == 1 + active.sum()
        # a fresh scaler starts at mean 0 with one pseudo-count
        expected_mean = observations.sum(0).double() / (1 + active.sum())
        assert torch.allclose(scaler.running_mean, expected_mean, atol=1e-5)


def test_inactive_steps_stay_out_of_the_maddpg_observation_statistics():
    from test_maddpg import build

    env = wrap_env(lambda: ContinuousEnv(max_steps=6, leave_at=2), num_envs=2, seed=0)
    agent = build(env, cfg={"observation_preprocessor": RunningStandardScaler, "learning_starts": 100})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    scaler = agent.observation_preprocessor(agent.groups[0])
    assert float(scaler.current_count) == 1 + 6 * 2 * 3 - 4 * 2


@pytest.mark.parametrize("algorithm", ["mappo", "ippo"])
def test_a_feed_forward_critic_values_the_rollout_at_the_update_as_it_would_have_at_each_step(tmp_path, algorithm):
    """The rollout is valued in one pass when the update begins; the values must be those the critic gave
    at each collected step (per-agent stacked critics, a state preprocessor and value normalisation with
    statistics from earlier rollouts, a rollout that spans two ``train()`` calls with an evaluation between).
    """
    set_seed(0)
    env = spread(num_envs=4)
    cfg = {"learning_epochs": 1, "mini_batches": 2, "state_preprocessor": RunningStandardScaler,
           "value_preprocessor": RunningStandardScaler}
    agent = build_mappo(env, share=False, rollouts=10, directory=str(tmp_path), cfg=cfg, algorithm=algorithm)
    assert any(group.per_agent_roles for group in agent.groups)
    seen, compared = [], []
    original_record, original_advantages = agent.record_transition, agent.compute_advantages

    def record_transition(**kwargs):
        if agent.training:
            with torch.no_grad():
                seen.append([agent._values(group, stack_agents(kwargs["observations"], group.uids), kwargs["states"])[0]
                             for group in agent.groups])
        original_record(**kwargs)

    def compute_advantages():
        original_advantages()
        for k, group in enumerate(agent.groups):
            expected = torch.stack([step[k] for step in seen[-10:]])
            compared.append(expected.abs().max().item())
            assert torch.allclose(group.memory.get_tensor_by_name("values"), expected, atol=1e-5, rtol=1e-5)

    agent.record_transition, agent.compute_advantages = record_transition, compute_advantages
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 26, "disable_progressbar": True})
    trainer.train()
    trainer.eval(episodes=4)
    trainer.train()
    assert len(compared) == 5 * len(agent.groups)  # five rollouts checked
    assert min(compared) > 0.0  # values were compared, not zeros


@pytest.mark.parametrize("members", [1, 3])
def test_ppo_losses_are_the_masked_means_of_their_terms(members):
    """The weighted sums of ``ppo_losses`` equal the masked mean of each term (per set of models, then over the
    sets), including a set with no active sample (it adds nothing)."""
    from marlparts.agents.common.losses import masked_mean
    from marlparts.agents.ppo.losses import ppo_losses

    generator = torch.Generator().manual_seed(0)
    rows = 12 * members
    def column():
        return torch.randn(rows, 1, generator=generator)
    log_prob, old_log_prob, advantages, entropy = column(), column(), column(), column().abs()
    predicted, targets, old_values = column(), column(), column()
    active = torch.rand(rows, 1, generator=generator) > 0.3
    if members > 1:
        active.view(-1, members)[:, 1] = False  # the second member never acts
    cfg = {"ratio_clip": 0.2, "clip_predicted_values": True, "value_clip": 0.2, "value_loss_scale": 0.5,
           "entropy_loss_scale": 0.01}
    losses = ppo_losses(log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages, entropy=entropy,
                        predicted=predicted, targets=targets, old_values=old_values, active=active, cfg=cfg,
                        model_sets=members)
    ratio = (log_prob - old_log_prob).exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    clipped = old_values + (predicted - old_values).clamp(-0.2, 0.2)
    value_error = torch.max((predicted - targets).square(), (clipped - targets).square())
    def mean(values):
        return masked_mean(values, active, model_sets=members)
    torch.testing.assert_close(losses["policy"], -mean(surrogate))
    torch.testing.assert_close(losses["value"], 0.5 * mean(value_error))
    torch.testing.assert_close(losses["entropy"], -0.01 * mean(entropy))
    torch.testing.assert_close(losses["kl"], mean(ratio - 1.0 - (log_prob - old_log_prob)))
    if members > 1:  # each member weighs the same: the silent one counts as 0 in the mean over members
        own = [masked_mean(entropy.view(-1, members)[:, k], active.view(-1, members)[:, k]) for k in range(members)]
        torch.testing.assert_close(losses["entropy_value"], sum(own) / members)


def test_ppo_losses_name_a_policy_output_with_more_than_one_value_per_sample():
    from marlparts.agents.ppo.losses import ppo_losses

    one = torch.zeros(4, 1)
    with pytest.raises(ValueError, match="the policy's entropy has shape \\(4, 2\\)"):
        ppo_losses(log_prob=one, old_log_prob=one, advantages=one, entropy=torch.zeros(4, 2), predicted=one,
                   targets=one, old_values=one, active=one.bool(), cfg={"ratio_clip": 0.2, "clip_predicted_values": False,
                   "value_loss_scale": 1.0, "entropy_loss_scale": 0.0})


def test_a_masked_mean_of_small_half_precision_values_does_not_round_to_zero():
    values = torch.full((32768, 1), 1e-3, dtype=torch.float16)  # (mixed precision: a float16 loss term)
    mask = torch.ones(32768, 1, dtype=torch.bool)
    mask[::2] = False
    assert masked_mean(values, mask).item() == pytest.approx(1e-3, rel=1e-3)
    # rows b * 4 + k: members 0 and 2 have no active row (mean 0), members 1 and 3 a mean of 1e-3
    assert masked_mean(values, mask, model_sets=4).item() == pytest.approx(5e-4, rel=1e-3)


class EntropyScales(Callback):
    """The annealed entropy scale of the agent's first group after each update."""

    def __init__(self):
        self.scales = []

    def on_update(self, agent, metrics):
        self.scales.append(agent.loss_settings(agent.groups[0])["entropy_loss_scale"])


def annealing_agent(env, directory, **cfg):
    return build_mappo(env, rollouts=4, directory=directory,
                       cfg={"entropy_loss_scale": 0.01, "final_entropy_loss_scale": 0.002,
                            "entropy_annealing_timesteps": 16, **cfg})


def test_an_annealed_entropy_scale_moves_linearly_over_its_steps_whatever_the_train_calls(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=None), num_envs=2, seed=0)
    expected = [0.01 + (0.002 - 0.01) * min(step / 16, 1.0) for step in (4, 8, 12, 16, 20, 24)]
    whole, split = EntropyScales(), EntropyScales()
    agent = annealing_agent(env, str(tmp_path / "whole"))
    assert agent.loss_settings(agent.groups[0])["entropy_loss_scale"] == 0.01  # before the first update
    SequentialTrainer(env=env, agents=agent, callbacks=[whole], cfg={"timesteps": 24, "disable_progressbar": True}).train()
    agent = annealing_agent(env, str(tmp_path / "split"))
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[split], cfg={"timesteps": 8, "disable_progressbar": True})
    for _ in range(3):  # several train() calls continue one run
        trainer.train()
    assert whole.scales == pytest.approx(expected) and split.scales == pytest.approx(expected)
    checkpoint = str(tmp_path / "at_24.pt")
    agent.save(checkpoint)
    resumed, scales = annealing_agent(env, str(tmp_path / "resumed")), EntropyScales()
    resumed.load(checkpoint)
    SequentialTrainer(env=env, agents=resumed, callbacks=[scales], cfg={"timesteps": 4, "disable_progressbar": True}).train()
    assert scales.scales == pytest.approx([0.002])  # a resumed run goes on at the end of its annealing


def test_annealing_needs_its_number_of_steps_and_takes_a_final_scale_per_agent(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=None), num_envs=2, seed=0)
    with pytest.raises(ValueError, match="entropy_annealing_timesteps"):
        build_mappo(env, directory=str(tmp_path), cfg={"final_entropy_loss_scale": 0.0})
    agent = build_mappo(env, share=False, directory=str(tmp_path),
                        cfg={"stack_models": False, "entropy_loss_scale": {"agent_0": 0.02, "agent_1": 0.01, "agent_2": 0.0},
                             "final_entropy_loss_scale": {"agent_0": 0.0, "agent_1": 0.0, "agent_2": 0.0},
                             "entropy_annealing_timesteps": 10})
    agent.annealing_progress = 0.5
    assert [agent.loss_settings(group)["entropy_loss_scale"] for group in agent.groups] == pytest.approx([0.01, 0.005, 0.0])
    constant = build_mappo(env, rollouts=4, directory=str(tmp_path))
    assert constant.loss_settings(constant.groups[0]) is constant.groups[0].cfg


def test_a2c_losses_give_ppo_s_gradient_at_the_first_step_and_need_no_old_values():
    from marlparts.agents.ppo.a2c import a2c_losses
    from marlparts.agents.ppo.losses import ppo_losses

    torch.manual_seed(0)
    samples = 12
    advantages, targets = torch.randn(samples, 1), torch.randn(samples, 1)
    active = torch.rand(samples, 1) > 0.3
    entropy = torch.rand(samples)
    cfg = {"ratio_clip": 0.2, "entropy_loss_scale": 0.01, "clip_predicted_values": False, "value_clip": 0.2,
           "value_loss_scale": 0.5}
    gradients = []
    for losses in (a2c_losses, ppo_losses):
        log_prob = torch.randn(samples, 1).requires_grad_()
        predicted = torch.randn(samples, 1).requires_grad_()
        torch.manual_seed(1)
        log_prob.data, predicted.data = torch.randn(samples, 1), torch.randn(samples, 1)
        extra = {"old_log_prob": log_prob.detach(), "old_values": predicted.detach()} if losses is ppo_losses else {}
        result = losses(log_prob=log_prob, advantages=advantages, entropy=entropy, predicted=predicted, targets=targets,
                        active=active, cfg=cfg, model_sets=2, **extra)
        (result["policy"] + result["value"]).backward()
        gradients.append((log_prob.grad, predicted.grad, result["entropy"]))
    for a2c, ppo in zip(*gradients):
        assert torch.allclose(a2c, ppo, atol=1e-6)
    assert gradients[0][0][~active].abs().max() == 0  # an inactive sample moves nothing

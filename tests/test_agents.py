import copy
import os

import pytest
import torch
from helpers import Policy, Value, build_mappo, parameters_vector
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import EnvCopyError, wrap_env
from marlparts.memories import RandomMemory
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


def spread(num_envs=4, seed=0):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=num_envs, seed=seed)


def test_unknown_config_key_suggests_the_closest(tmp_path):
    with pytest.raises(KeyError, match=r"'learning_rat'.*did you mean 'learning_rate'"):
        build_mappo(spread(), directory=str(tmp_path), cfg={"learning_rat": 1e-3})
    with pytest.raises(KeyError, match=r"\['experiment'\]\['directry'\].*'directory'"):
        build_mappo(spread(), directory=str(tmp_path), cfg={"experiment": {"directry": "x"}})


def test_default_config_copy_is_deep():
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["experiment"]["directory"] = "elsewhere"
    assert MAPPO_DEFAULT_CONFIG["experiment"]["directory"] == "runs"


def test_missing_agent_or_role_in_models_and_memories_is_named():
    env = spread()
    agent = build_mappo(env)
    models = dict(agent.models)
    memories = {u: RandomMemory(memory_size=4, num_envs=4) for u in env.possible_agents}
    common = dict(possible_agents=env.possible_agents, observation_spaces=env.observation_spaces,
                  action_spaces=env.action_spaces, state_spaces=env.state_spaces)
    without_agent = {u: m for u, m in models.items() if u != "agent_1"}
    with pytest.raises(KeyError, match=r"models.*agent_1"):
        MAPPO(models=without_agent, memories=memories, **common)
    without_role = dict(models, agent_2={"policy": models["agent_2"]["policy"]})
    with pytest.raises(KeyError, match=r"models\['agent_2'\].*'value'"):
        MAPPO(models=without_role, memories=memories, **common)
    with pytest.raises(KeyError, match=r"memories.*agent_0"):
        MAPPO(models=models, memories={u: m for u, m in memories.items() if u != "agent_0"}, **common)


def test_value_model_of_wrong_input_size_is_named():
    env = spread()
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    value = Value(observation_space=env.state_space)  # one output, but MAPPO's default wants one per agent
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['value'\].*agent_specific_values.*returns \(1,\).*expected 3"):
        MAPPO(possible_agents=env.possible_agents, models={u: {"policy": policy, "value": value} for u in env.possible_agents},
              memories={u: RandomMemory(memory_size=100, num_envs=4) for u in env.possible_agents},
              observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, state_spaces=env.state_spaces)


def test_groups_follow_model_identity():
    env = spread()
    shared = build_mappo(env, share=True)
    assert [g.uids for g in shared.groups] == [["agent_0", "agent_1", "agent_2"]]
    assert len(shared.trained) == 2
    separate = build_mappo(env, share=False, cfg={"stack_models": False})
    assert [g.uids for g in separate.groups] == [["agent_0"], ["agent_1"], ["agent_2"]]
    assert len(separate.trained) == 6
    # separate models of one class and shape run as one stacked group, still named per agent in checkpoints
    stacked = build_mappo(env, share=False)
    assert [(g.uids, sorted(g.per_agent_roles)) for g in stacked.groups] == [
        (["agent_0", "agent_1", "agent_2"], ["policy", "value"])]
    assert len(stacked.trained) == 2
    assert sorted(stacked.checkpoint_parts()) == sorted(separate.checkpoint_parts())


def _collect_rollout(agent, env, steps):
    obs, infos = env.reset()
    states = env.state()
    agent.init({"timesteps": steps})
    for t in range(steps):
        actions = agent.act(obs, states, infos, t, steps)
        next_obs, rewards, terminated, truncated, infos = env.step(actions)
        next_states = env.state()
        agent.record_transition(observations=obs, states=states, actions=actions, rewards=rewards,
                                next_observations=next_obs, next_states=next_states, terminated=terminated,
                                truncated=truncated, infos=infos, timestep=t, timesteps=steps)
        obs, states = next_obs, next_states


def test_shared_policy_gradient_equals_mean_of_per_agent_losses(tmp_path):
    set_seed(0)
    env = spread()
    agent = build_mappo(env, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    _collect_rollout(agent, env, 4)
    agent.compute_advantages()
    group = agent.groups[0]
    policy = group.models["policy"]
    indexes = torch.arange(len(group.memory))

    policy.zero_grad()
    losses = agent.group_losses(group, indexes)
    losses["policy"].backward()
    batched = [p.grad.clone() for p in policy.parameters()]

    # the same loss, agent by agent, from the stored samples
    names = ["observations", "actions", "log_prob", "advantages"]
    obs, actions, old_log_prob, advantages = group.memory.sample_by_index(names, indexes)
    policy.zero_grad()
    per_agent = []
    for i in range(group.size):
        inputs = {"observations": agent._policy_inputs(group, obs[:, i:i + 1]),
                  "taken_actions": actions[:, i]}
        _, log_prob, _ = policy.act(inputs, "policy")
        ratio = (log_prob - old_log_prob[:, i]).exp()
        surrogate = torch.min(ratio * advantages[:, i], ratio.clamp(0.8, 1.2) * advantages[:, i])
        per_agent.append(-surrogate.mean())
    torch.stack(per_agent).mean().backward()
    for a, b in zip(batched, (p.grad for p in policy.parameters())):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("stack_models, optimizers", [(False, 6), (True, 2)])
def test_one_optimizer_step_per_model_per_minibatch(tmp_path, stack_models, optimizers):
    env = spread()
    agent = build_mappo(env, share=False, directory=str(tmp_path),
                        cfg={"learning_epochs": 3, "mini_batches": 2, "stack_models": stack_models,
                             "value_min_steps": 1,  # no critic step alone (tests/test_critic_steps.py)
                             "experiment": {"tensorboard": False}})
    _collect_rollout(agent, env, 4)
    counts = {}
    for key, optimizer in enumerate(record.optimizer for record in agent.trained):
        original = optimizer.step

        def counted(*args, _key=key, _original=original, **kwargs):
            counts[_key] = counts.get(_key, 0) + 1
            return _original(*args, **kwargs)

        optimizer.step = counted
    agent.update(3, 4)
    assert len(counts) == optimizers and set(counts.values()) == {6}  # a stack of 3 models has one optimizer


def test_eval_is_greedy_and_save_load_restores_greedy_actions(tmp_path):
    set_seed(1)
    env = spread()
    agent = build_mappo(env, directory=str(tmp_path), rollouts=4)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True})
    trainer.train()
    obs, infos = env.reset()
    agent.set_mode("eval")
    first = agent.act(obs, env.state(), infos, 0, 0)
    second = agent.act(obs, env.state(), infos, 0, 0)
    for uid in env.possible_agents:
        assert torch.equal(first[uid], second[uid])
        logits = agent.models[uid]["policy"].compute(
            {"observations": agent._policy_inputs(agent.groups[0], obs[uid].unsqueeze(1))})[0]
        assert torch.equal(first[uid], logits.argmax(-1, keepdim=True))
    path = str(tmp_path / "agent.pt")
    agent.save(path)
    set_seed(2)
    fresh = build_mappo(env, directory=str(tmp_path / "other"), rollouts=4)
    fresh.load(path)
    fresh.set_mode("eval")
    restored = fresh.act(obs, env.state(), infos, 0, 0)
    for uid in env.possible_agents:
        assert torch.equal(first[uid], restored[uid])


def test_checkpoint_load_reads_no_code(tmp_path):
    agent = build_mappo(spread(), directory=str(tmp_path))
    path = tmp_path / "evil.pt"
    torch.save({"modules": {}, "payload": os.system}, path)
    with pytest.raises(Exception, match="(?i)weights_only|unsupported|global"):
        agent.load(str(path))


def test_same_seed_gives_same_first_updates(tmp_path):
    results = []
    for _ in range(2):
        set_seed(7)
        env = spread(seed=7)
        agent = build_mappo(env, directory=str(tmp_path), rollouts=4)
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 12, "disable_progressbar": True}).train()
        results.append([parameters_vector(m) for m in agent.distinct_models()])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_failed_run_keeps_written_checkpoints_and_logs(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=100, leave_at=99, raise_at=9), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=2,
                        cfg={"experiment": {"checkpoint_interval": 4, "write_interval": 2, "experiment_name": "run"}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 20, "disable_progressbar": True})
    with pytest.raises(EnvCopyError, match="copy 0 raised in step"):
        trainer.train()
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(os.listdir(folder)) == ["agent_4.pt", "agent_8.pt"]
    fresh = build_mappo(env, directory=str(tmp_path / "x"), rollouts=2)
    fresh.load(str(folder / "agent_8.pt"))
    assert fresh.timestep == 8
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "run"))


def test_inactive_steps_are_left_out_of_the_losses(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=6, leave_at=2), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=6, cfg={"experiment": {"tensorboard": False}})
    _collect_rollout(agent, env, 6)
    active = agent.groups[0].memory.get_tensor_by_name("active")
    # agent_1 acts at steps 0 and 1 (it terminates on step 2's transition: t=1) and is inactive after
    assert active[:, 0, 1, 0].tolist() == [True, True, False, False, False, False]
    assert active[:, :, [0, 2]].all()
    agent.compute_advantages()
    group = agent.groups[0]
    indexes = torch.arange(len(group.memory))
    baseline = agent.group_losses(group, indexes)["policy"]
    # corrupt what is stored for the inactive steps: the losses must not change
    memory = group.memory
    advantages = memory.get_tensor_by_name("advantages").clone()
    advantages[~active] = 1e6
    memory.set_tensor_by_name("advantages", advantages)
    assert torch.allclose(agent.group_losses(group, indexes)["policy"], baseline)


def test_per_agent_config_is_resolved_per_group(tmp_path):
    env = spread()
    per_agent = {"agent_0": 0.01, "agent_1": 0.02, "agent_2": 0.01}
    separate = build_mappo(env, share=False, directory=str(tmp_path),
                           cfg={"entropy_loss_scale": per_agent, "stack_models": False})
    assert [g.cfg["entropy_loss_scale"] for g in separate.groups] == [0.01, 0.02, 0.01]
    # stacking merges only the agents whose settings agree
    stacked = build_mappo(env, share=False, directory=str(tmp_path), cfg={"entropy_loss_scale": per_agent})
    assert [(g.uids, g.cfg["entropy_loss_scale"]) for g in stacked.groups] == [(["agent_0", "agent_2"], 0.01),
                                                                                (["agent_1"], 0.02)]
    with pytest.raises(ValueError, match="differs within the group"):
        build_mappo(env, share=True, directory=str(tmp_path), cfg={"entropy_loss_scale": per_agent})


def test_memory_for_the_wrong_number_of_envs_is_named(tmp_path):
    env = spread(num_envs=4)
    agent = build_mappo(spread(num_envs=2), directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 2, "disable_progressbar": True})
    with pytest.raises(ValueError, match=r"memories\['agent_0'\].*num_envs=2.*4 copies"):
        trainer.train()


@pytest.mark.parametrize("mode,inputs,outputs", [("outputs", 54, 3), ("one_hot", 57, 1), ("none", 54, 1)])
def test_mappo_critic_modes(tmp_path, mode, inputs, outputs):
    env = spread()
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    from helpers import box

    value = Value(observation_space=box(inputs), output_size=outputs)
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=4, agent_specific_values=mode)
    cfg["experiment"].update(directory=str(tmp_path), tensorboard=False)
    agent = MAPPO(possible_agents=env.possible_agents,
                  models={u: {"policy": policy, "value": value} for u in env.possible_agents},
                  memories={u: RandomMemory(memory_size=4, num_envs=4) for u in env.possible_agents},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, cfg=cfg)
    obs, _ = env.reset()
    from marlparts.utils import stack_agents

    values, _ = agent.predict_values(agent.groups[0], stack_agents(obs, env.possible_agents), env.state())
    assert values.shape == (4, 3, 1)
    if mode == "none":
        assert torch.equal(values[:, 0], values[:, 1])
    else:
        assert not torch.equal(values[:, 0], values[:, 1])
    _collect_rollout(agent, env, 4)
    agent.update(3, 4)


def test_unknown_critic_mode_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="agent_specific_values.*'per_agent'"):
        build_mappo(spread(), directory=str(tmp_path), cfg={"agent_specific_values": "per_agent"})


def test_best_checkpoint_follows_the_evaluation_return(tmp_path):
    agent = build_mappo(spread(), directory=str(tmp_path), cfg={"experiment": {"experiment_name": "best"}})
    agent.init({"timesteps": 100})
    best = tmp_path / "best" / "checkpoints" / "best_agent.pt"

    def evaluated(mean_return):
        return {"mean_return": mean_return, "returns": {u: mean_return for u in agent.possible_agents}, "mean_length": 25}

    agent.timestep = 10
    agent.record_evaluation(evaluated(-10.0))
    assert best.exists() and torch.load(best, weights_only=True)["counters"]["best_return"] == -10.0
    agent.timestep = 20
    agent.record_evaluation(evaluated(-20.0))  # worse: the best stays
    assert torch.load(best, weights_only=True)["counters"]["timestep"] == 10
    agent.timestep = 30
    agent.record_evaluation(evaluated(-5.0))
    assert torch.load(best, weights_only=True)["counters"] == {"timestep": 30, "best_return": -5.0, "evaluated_at": 30,
                                                                 "zero_sum_self_play": False}


def test_preprocessor_statistics_are_fixed_during_a_rollout_and_updated_after_it(tmp_path):
    from marlparts.resources import RunningStandardScaler

    set_seed(0)
    env = spread(num_envs=4)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path),
                        cfg={"observation_preprocessor": RunningStandardScaler,
                             "state_preprocessor": RunningStandardScaler, "learning_epochs": 1, "mini_batches": 1})
    observation_scaler = agent.observation_preprocessor(agent.groups[0])
    state_scaler = agent.state_preprocessor(agent.groups[0])
    kls = []
    original = agent.group_losses

    def recording_losses(group, indexes):
        losses = original(group, indexes)
        kls.append(losses["kl"].item())
        return losses

    agent.group_losses = recording_losses
    counts = []
    update = agent.update
    agent.update = lambda *args: (counts.append(float(observation_scaler.current_count)), update(*args))
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True}).train()
    assert counts == [1.0], "statistics changed while the rollout was collected"  # a new scaler counts 1
    assert float(observation_scaler.current_count) == 1 + 4 * 4 * 3  # steps x copies x agents
    assert float(state_scaler.current_count) == 1 + 4 * 4  # steps x copies
    assert abs(kls[0]) < 1e-6, "the first minibatch must start at probability ratio 1"


def test_ppo_updates_when_the_rollout_is_full_across_train_calls(tmp_path):
    env = spread(num_envs=2)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"learning_epochs": 1, "mini_batches": 1})
    updates = []
    update = agent.update
    agent.update = lambda *args: (updates.append(agent.groups[0].memory.filled), update(*args))
    for steps in (3, 3, 2):  # 8 steps: a full rollout after the 4th and the 8th
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()
    assert updates == [True, True]


@pytest.mark.parametrize("limit", [0.05, 1e6])
def test_a_trained_model_clips_and_forgets_its_gradients_as_torch_does(limit):
    from marlparts.agents.common.trained_model import TrainedModel

    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    theirs = copy.deepcopy(ours)
    record = TrainedModel(name="policy[a]", role="policy", model=ours, owners=["a"],
                          optimizer=torch.optim.Adam(ours.parameters()), grad_norm_clip=limit)
    inputs = torch.randn(16, 4)
    for model in (ours, theirs):
        model(inputs).square().sum().backward()
    record.clip_gradients()
    torch.nn.utils.clip_grad_norm_(theirs.parameters(), limit)
    for mine, reference in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(mine.grad, reference.grad)
    record.zero_gradients()
    assert all(parameter.grad is None for parameter in ours.parameters())


def test_the_config_chooses_the_optimizer_class_and_its_arguments(tmp_path):
    env = spread()
    agent = build_mappo(env, directory=str(tmp_path),
                        cfg={"optimizer": torch.optim.SGD, "optimizer_kwargs": {"momentum": 0.5}, "learning_rate": 0.01,
                             "experiment": {"tensorboard": False}})
    assert {type(record.optimizer) for record in agent.trained} == {torch.optim.SGD}
    assert {(group["lr"], group["momentum"]) for record in agent.trained
            for group in record.optimizer.param_groups} == {(0.01, 0.5)}
    default = build_mappo(env, directory=str(tmp_path / "default"), cfg={"experiment": {"tensorboard": False}})
    assert {type(record.optimizer) for record in default.trained} == {torch.optim.Adam}

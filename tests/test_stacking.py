"""Separate per-agent models of one class and shape, run as one stacked computation."""

import copy

import gymnasium
import numpy as np
import pytest
import torch
from helpers import Policy, Value, assert_same_state, build_mappo, drive_synthetic, greedy_sampling
from mpe2 import simple_spread_v3

from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, GaussianMixin, Model, cnn, mlp
from marlparts.models.stacked import StackedModels
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


def spread(num_envs=2, seed=0):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=num_envs, seed=seed)


class GaussianPolicy(GaussianMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(8,))
        self.log_std = torch.nn.Parameter(torch.randn(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class ReshapingPolicy(Policy):
    """A compute that flattens its batch itself: it cannot be stacked."""

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"].reshape(-1, self.num_observations)), {}


def box(n):
    return gymnasium.spaces.Box(-1.0, 1.0, (n,), np.float32)


@pytest.mark.parametrize("kind", ["categorical", "gaussian", "value"])
def test_a_stack_gives_each_member_its_own_outputs(kind):
    torch.manual_seed(0)
    if kind == "categorical":
        members = [Policy(observation_space=box(5), action_space=gymnasium.spaces.Discrete(4)) for _ in range(3)]
        taken = torch.randint(0, 4, (12, 1))
    elif kind == "gaussian":
        members = [GaussianPolicy(observation_space=box(5), action_space=box(2)) for _ in range(3)]
        taken = torch.randn(12, 2)
    else:
        members = [Value(observation_space=box(5), output_size=2) for _ in range(3)]
        taken = None
    stack = StackedModels.build(members, check_inputs=5)
    assert stack is not None
    rows = torch.randn(12, 5)  # 4 env copies x 3 agents, batch-major: row 4 belongs to member 1
    inputs = {"observations": rows} if taken is None else {"observations": rows, "taken_actions": taken}
    _, log_prob, outputs = stack.act(inputs)
    for k, member in enumerate(members):
        own = {"observations": rows[k::3]} if taken is None else {"observations": rows[k::3], "taken_actions": taken[k::3]}
        _, own_log_prob, own_outputs = member.act(own)
        assert torch.allclose(outputs["mean_actions"][k::3], own_outputs["mean_actions"], atol=1e-6)
        if taken is not None:
            assert torch.allclose(log_prob[k::3], own_log_prob, atol=1e-6)
            assert torch.allclose(outputs["entropy"][k::3], own_outputs["entropy"], atol=1e-6)


def test_bound_members_read_and_load_their_slice_of_the_stack():
    torch.manual_seed(0)
    members = [GaussianPolicy(observation_space=box(5), action_space=box(2)) for _ in range(3)]
    before = [copy.deepcopy(member.state_dict()) for member in members]
    stack = StackedModels.build(members, check_inputs=5)
    stack.bind_members()
    for member, state in zip(members, before):  # binding keeps every member's values
        assert all(torch.equal(member.state_dict()[key], value) for key, value in state.items())
    with torch.no_grad():
        for parameter in stack.parameters():
            parameter.add_(1.0)  # what an optimizer step on the stack does
    assert torch.equal(members[1].log_std, before[1]["log_std"] + 1.0)
    assert torch.equal(members[2].net[0].weight, before[2]["net.0.weight"] + 1.0)
    members[0].load_state_dict(before[0])  # loading a member writes into the stack
    rows = torch.randn(6, 5)
    _, _, outputs = stack.act({"observations": rows, "taken_actions": torch.zeros(6, 2)})
    fresh = GaussianPolicy(observation_space=box(5), action_space=box(2))
    fresh.load_state_dict(before[0])
    assert torch.allclose(outputs["mean_actions"][0::3], fresh.compute({"observations": rows[0::3]})[0], atol=1e-6)


def test_models_whose_compute_cannot_be_stacked_run_one_by_one(tmp_path):
    torch.manual_seed(0)
    members = [ReshapingPolicy(observation_space=box(5), action_space=gymnasium.spaces.Discrete(4)) for _ in range(3)]
    assert "does not reproduce each model's own outputs" in StackedModels.build(members, check_inputs=5)
    env = spread()
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    models = {uid: {"policy": ReshapingPolicy(observation_space=obs_space, action_space=act_space),
                    "value": Value(observation_space=env.state_space, output_size=3)} for uid in env.possible_agents}
    agent = build_mappo(env, share=False, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    with pytest.warns(UserWarning, match="not run as one batched model, but one agent after another: their 'policy' "
                                         "models cannot be stacked: their batched run does not reproduce"):
        rebuilt = type(agent)(possible_agents=env.possible_agents, models=models,
                              memories={uid: RandomMemory(memory_size=4, num_envs=2) for uid in env.possible_agents},
                              observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                              state_spaces=env.state_spaces, cfg=agent.cfg)
    # the critics could stack, but a merged group needs every role stacked: the agents stay in groups of one
    assert [group.uids for group in rebuilt.groups] == [["agent_0"], ["agent_1"], ["agent_2"]]
    SequentialTrainer(env=env, agents=rebuilt, cfg={"timesteps": 8, "disable_progressbar": True}).train()


def test_agents_with_different_settings_are_not_stacked(tmp_path):
    env = spread()
    agent = build_mappo(env, share=False, directory=str(tmp_path),
                        cfg={"learning_rate": {"agent_0": 1e-3, "agent_1": 1e-3, "agent_2": 5e-4}})
    assert [group.uids for group in agent.groups] == [["agent_0", "agent_1"], ["agent_2"]]
    assert [record.learning_rate() for record in agent.trained] == [1e-3, 1e-3, 5e-4, 5e-4]


@pytest.mark.parametrize("algorithm, critic_mode", [("mappo", "outputs"), ("mappo", "one_hot"), ("ippo", None)])
def test_stacked_training_is_the_training_of_separate_models(tmp_path, monkeypatch, algorithm, critic_mode):
    """Same start, same data: the stacked run ends with the separate run's parameters, optimizer states,
    preprocessor statistics and value normalisers (per-agent advantages, per-agent gradient clipping)."""
    greedy_sampling(monkeypatch)
    from marlparts.resources import RunningStandardScaler

    cfg = {"learning_epochs": 2, "mini_batches": 2, "grad_norm_clip": 0.05,
           "observation_preprocessor": RunningStandardScaler, "state_preprocessor": RunningStandardScaler,
           "experiment": {"tensorboard": False, "csv": False}}
    if critic_mode == "one_hot":
        cfg["agent_specific_values"] = "one_hot"
    runs = {}
    for stack_models in (True, False):
        set_seed(0)
        env = spread()
        agent = build_mappo(env, share=False, directory=str(tmp_path / str(stack_models)), algorithm=algorithm,
                            cfg=dict(cfg, stack_models=stack_models))
        runs[stack_models] = (agent, env)
    stacked, separate = runs[True][0], runs[False][0]
    assert len(stacked.groups) == 1 and stacked.groups[0].per_agent_roles == {"policy", "value"}
    assert len(separate.groups) == 3
    separate.load_state_dict(stacked.state_dict())  # one checkpoint format: the separate run starts where the stack does
    for agent, env in runs.values():
        set_seed(1)  # the same minibatch permutations
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 12, "disable_progressbar": True}).train()
    assert stacked.timestep == 12
    assert_same_state(stacked, separate)
    assert all(record.member_state.uniform for record in stacked.trained)  # every member stepped: one step each time
    # and back: the separate run's checkpoint loads into the stack, which then acts as the separate models
    stacked.load_state_dict(separate.state_dict())
    obs, infos = runs[True][1].reset()
    stacked.set_mode("eval")
    separate.set_mode("eval")
    state = runs[True][1].state()
    a, b = stacked.act(obs, state, infos, 0, 0), separate.act(obs, state, infos, 0, 0)
    assert all(torch.equal(a[uid], b[uid]) for uid in a)


def test_a_failed_load_leaves_the_stack_as_it_was(tmp_path):
    env = spread()
    agent = build_mappo(env, share=False, directory=str(tmp_path))
    before = copy.deepcopy(agent.state_dict()["modules"])
    state = agent.state_dict()
    state["modules"]["policy[agent_1]"] = dict(state["modules"]["policy[agent_1]"])
    state["modules"]["policy[agent_1]"]["net.0.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"policy\[agent_1\].*net.0.weight"):
        agent.load_state_dict(state)
    after = agent.state_dict()["modules"]
    assert all(torch.equal(after["policy[agent_0]"][k], v) for k, v in before["policy[agent_0]"].items())
    assert all(torch.equal(after["policy[agent_1]"][k], v) for k, v in before["policy[agent_1]"].items())


def test_models_of_different_shapes_stack_by_shape(tmp_path):
    from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG

    sizes = {"scout_0": 4, "scout_1": 4, "tank_0": 6, "tank_1": 6, "tank_2": 6}
    spaces = {uid: box(size) for uid, size in sizes.items()}
    actions = {uid: gymnasium.spaces.Discrete(3) for uid in sizes}
    models = {uid: {"policy": Policy(observation_space=spaces[uid], action_space=actions[uid]),
                    "value": Value(observation_space=spaces[uid])} for uid in sizes}
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=4)
    cfg["experiment"].update(directory=str(tmp_path), tensorboard=False)
    agent = IPPO(possible_agents=list(sizes), models=models,
                 memories={uid: RandomMemory(memory_size=4, num_envs=2) for uid in sizes},
                 observation_spaces=spaces, action_spaces=actions, cfg=cfg)
    assert [group.uids for group in agent.groups] == [["scout_0", "scout_1"], ["tank_0", "tank_1", "tank_2"]]
    observations = {uid: torch.randn(2, size) for uid, size in sizes.items()}
    agent.set_mode("eval")
    chosen = agent.act(observations, None, {}, 0, 0)
    for uid in sizes:  # each agent's greedy action is its own model's
        own = models[uid]["policy"].act({"observations": observations[uid]})[2]["mean_actions"]
        assert torch.equal(chosen[uid], own)


# ----------------------------------------------------------------------------- synthetic runs, no env
UIDS = ["a0", "a1", "a2"]


def synthetic_pair(make_models, tmp_path, cfg=None, rollouts=4):
    """A stacked and a separate MAPPO from identical copies of ``make_models()`` (4-feature observations,
    3 actions, a 6-feature state, 2 env copies)."""
    from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
    from marlparts.utils.config import merge_config

    set_seed(0)
    models = make_models()
    agents = []
    for stack_models, copied in ((True, models), (False, copy.deepcopy(models))):
        base = MAPPO_DEFAULT_CONFIG.copy()
        base["rollouts"] = rollouts
        base["experiment"].update(directory=str(tmp_path), checkpoint_interval=0, tensorboard=False, csv=False)
        merged = merge_config(base, dict(cfg or {}, stack_models=stack_models))
        agents.append(MAPPO(possible_agents=UIDS, models=copied, cfg=merged,
                            memories={u: RandomMemory(memory_size=rollouts, num_envs=2) for u in UIDS},
                            observation_spaces={u: box(4) for u in UIDS},
                            action_spaces={u: gymnasium.spaces.Discrete(3) for u in UIDS},
                            state_spaces={u: box(6) for u in UIDS}))
    return agents


def drive(agent, steps, active=None):
    """``steps`` synthetic transitions of the test's agents (4-feature observations, a 6-feature state)."""
    drive_synthetic(agent, steps, UIDS, active=active)


def own_models():
    return {u: {"policy": Policy(observation_space=box(4), action_space=gymnasium.spaces.Discrete(3)),
                "value": Value(observation_space=box(6), output_size=3)} for u in UIDS}


def test_agents_active_on_different_steps_weigh_as_in_separate_groups(tmp_path, monkeypatch):
    """a1 leaves one copy after 2 steps, a2 both after 1: each agent's losses are its own mean, as if alone."""
    greedy_sampling(monkeypatch)

    def active(t):
        return {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.tensor([[True], [t < 2]]),
                "a2": torch.full((2, 1), t < 1)}

    stacked, separate = synthetic_pair(own_models, tmp_path, {"learning_epochs": 2, "mini_batches": 2})
    for agent in (stacked, separate):
        set_seed(1)
        drive(agent, 8, active)
    assert_same_state(stacked, separate)


def test_a_shared_policy_with_own_critics_normalises_each_agents_advantages(tmp_path, monkeypatch):
    greedy_sampling(monkeypatch)

    def shared_policy():
        policy = Policy(observation_space=box(4), action_space=gymnasium.spaces.Discrete(3))
        return {u: {"policy": policy, "value": Value(observation_space=box(6), output_size=3)} for u in UIDS}

    stacked, separate = synthetic_pair(shared_policy, tmp_path, {"learning_epochs": 1, "mini_batches": 1}, rollouts=8)
    assert [(g.uids, set(g.per_agent_roles)) for g in stacked.groups] == [(UIDS, {"value"})]
    for agent in (stacked, separate):
        set_seed(1)
        drive(agent, 8)
    advantages = stacked.groups[0].memory.get_tensor_by_name("advantages")
    assert torch.allclose(advantages.mean(dim=(0, 1)), torch.zeros(3, 1), atol=1e-5)
    assert_same_state(stacked, separate)


def test_loading_a_checkpoint_taken_before_the_first_update_clears_the_optimizer(tmp_path, monkeypatch):
    greedy_sampling(monkeypatch)
    stacked, separate = synthetic_pair(own_models, tmp_path, {"learning_epochs": 1, "mini_batches": 1})
    fresh = stacked.state_dict()
    for agent in (stacked, separate):
        set_seed(1)
        drive(agent, 4)  # one update: the optimizers have a state
        agent.load_state_dict(fresh)
    assert all(not record.optimizer.state for record in stacked.trained)
    for agent in (stacked, separate):
        set_seed(2)
        drive(agent, 4)
    assert_same_state(stacked, separate)


def test_an_agent_inactive_for_a_whole_rollout_keeps_finite_parameters(tmp_path, monkeypatch):
    greedy_sampling(monkeypatch)

    def active(t):
        return {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.ones(2, 1, dtype=torch.bool),
                "a2": torch.zeros(2, 1, dtype=torch.bool)}

    for agent in synthetic_pair(own_models, tmp_path):
        drive(agent, 4, active)
        assert all(torch.isfinite(tensor).all() for model in agent.distinct_models() for tensor in model.parameters())


class TrunkAndHead(CategoricalMixin, Model):
    def __init__(self, trunk=None, **kwargs):
        super().__init__(**kwargs)
        self.trunk = trunk if trunk is not None else torch.nn.Linear(self.num_observations, 8)
        self.head = torch.nn.Linear(8, self.num_actions)

    def compute(self, inputs, role=""):
        return self.head(torch.tanh(self.trunk(inputs["observations"]))), {}


class ScaledPolicy(Policy):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def compute(self, inputs, role=""):
        return self.scale * self.net(inputs["observations"]), {}


def test_models_that_cannot_act_as_one_are_not_stacked():
    torch.manual_seed(0)
    discrete = gymnasium.spaces.Discrete(3)
    trunk = torch.nn.Linear(4, 8)
    shared_trunk = [TrunkAndHead(trunk=trunk, observation_space=box(4), action_space=discrete) for _ in range(3)]
    assert "share a tensor" in StackedModels.build(shared_trunk, check_inputs=4)  # one trunk cannot become three
    scalar = [ScaledPolicy(observation_space=box(4), action_space=discrete) for _ in range(3)]
    assert "0-dim" in StackedModels.build(scalar, check_inputs=4)
    bounds = [GaussianPolicy(observation_space=box(4), action_space=gymnasium.spaces.Box(-b, b, (2,), np.float32))
              for b in (1.0, 5.0)]
    assert "attributes" in StackedModels.build(bounds, check_inputs=4)  # each clips into its own action space
    frozen = [Policy(observation_space=box(4), action_space=discrete) for _ in range(2)]
    frozen[1].net[0].weight.requires_grad_(False)
    assert "requires_grad" in StackedModels.build(frozen, check_inputs=4)  # a frozen layer stays frozen


class ConvolutionalPolicy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn((5, 5, 2), self.num_actions, channels=(4,), kernel_sizes=(3,), strides=(1,), hidden_sizes=(8,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def test_convolutional_models_are_not_stacked_and_the_reason_names_the_layer():
    torch.manual_seed(0)
    members = [ConvolutionalPolicy(observation_space=gymnasium.spaces.Box(0, 1, (5, 5, 2)),
                                   action_space=gymnasium.spaces.Discrete(3)) for _ in range(3)]
    reason = StackedModels.build(members, check_inputs=50)
    assert isinstance(reason, str) and "Conv2d" in reason and "nn.Linear" in reason


class DropoutPolicy(Policy):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dropout = torch.nn.Dropout(0.5)
        self.register_buffer("offset", torch.zeros(self.num_actions), persistent=False)

    def compute(self, inputs, role=""):
        return self.dropout(self.net(inputs["observations"])) + self.offset, {}


def test_a_stack_follows_the_training_mode_and_keeps_non_persistent_buffers_out_of_checkpoints(tmp_path):
    models = {u: {"policy": DropoutPolicy(observation_space=box(4), action_space=gymnasium.spaces.Discrete(3)),
                  "value": Value(observation_space=box(6), output_size=3)} for u in UIDS}
    for u in UIDS:
        models[u]["policy"].eval()
    stacked, _ = synthetic_pair(lambda: models, tmp_path)
    stack = stacked.groups[0].models["policy"]
    stacked.set_mode("train")
    assert stack.batched.training and stack.batched.dropout.training
    stacked.set_mode("eval")
    assert not stack.batched.dropout.training
    assert "offset" not in stacked.state_dict()["modules"]["policy[a0]"]


# ----------------------------------------------------------------------------- optimizers, and members that sat out
def test_an_optimizer_that_is_not_element_wise_leaves_the_models_separate(tmp_path, monkeypatch):
    """Adafactor scales each step by the RMS of the whole tensor and factors its second moment over rows and
    columns: one step on the stacked tensor is not each member's own step, so the models are not stacked."""
    greedy_sampling(monkeypatch)
    cfg = {"optimizer": torch.optim.Adafactor, "learning_rate": 1e-2, "learning_epochs": 2, "mini_batches": 2}
    warning = r"torch.optim.Adafactor is not one whose step is known to be element-wise.*stack_models'\] = False"
    with pytest.warns(UserWarning, match=warning):
        stacked, separate = synthetic_pair(own_models, tmp_path, cfg)
    assert len(stacked.groups) == 3 and all(group.model_sets == 1 for group in stacked.groups)
    for agent in (stacked, separate):
        set_seed(1)
        drive(agent, 8)
    assert_same_state(stacked, separate, atol=1e-6, rtol=1e-6)


ELEMENT_WISE = [
    (torch.optim.Adam, {"fused": True}), (torch.optim.Adam, {"amsgrad": True, "weight_decay": 0.1}),
    (torch.optim.AdamW, {"weight_decay": 0.1}), (torch.optim.Adamax, {"weight_decay": 0.1}),
    (torch.optim.NAdam, {"momentum_decay": 0.01}), (torch.optim.RAdam, {"decoupled_weight_decay": True}),
    (torch.optim.SGD, {"momentum": 0.9, "dampening": 0.5, "weight_decay": 0.1}),
    (torch.optim.SGD, {"momentum": 0.9, "nesterov": True}), (torch.optim.RMSprop, {"centered": True, "momentum": 0.5}),
    (torch.optim.Adagrad, {"lr_decay": 0.1, "initial_accumulator_value": 0.5}), (torch.optim.Adadelta, {}),
    (torch.optim.Rprop, {}), (torch.optim.ASGD, {"t0": 2}),
]


@pytest.mark.parametrize("optimizer, options", ELEMENT_WISE, ids=lambda x: getattr(x, "__name__", str(x)))
def test_element_wise_optimizers_train_a_stack_as_separate_models_with_members_that_sit_out(
        tmp_path, monkeypatch, optimizer, options):
    """a2 sits out the first rollout and a1 the second: neither takes a step there (parameters, moments, step
    counts), and the stack goes on exactly as the separate models, whose step counts now differ."""
    greedy_sampling(monkeypatch)

    def active(t):
        return {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.full((2, 1), t < 4 or t >= 8),
                "a2": torch.tensor([[t >= 4], [t >= 5]])}

    cfg = {"optimizer": optimizer, "optimizer_kwargs": options, "learning_rate": 1e-2, "learning_epochs": 2,
           "mini_batches": 2}
    stacked, separate = synthetic_pair(own_models, tmp_path, cfg)
    assert len(stacked.groups) == 1
    for agent in (stacked, separate):
        set_seed(1)
        drive(agent, 12, active)
    # centred RMSprop divides by sqrt(E[g²] - E[g]²): the rounding of the batched products (1e-7) grows to 1e-6
    # there, with every member active as well
    tolerance = 1e-5 if options.get("centered") else 1e-6
    assert_same_state(stacked, separate, atol=tolerance, rtol=1e-5)
    steps = [stacked.state_dict()["modules"][f"optimizer:policy[{u}]"]["state"] for u in UIDS]
    if "step" in steps[0].get(0, {}):  # 3 updates of 4 minibatches for a0, 2 for a1 and a2
        assert [float(state[0]["step"]) for state in steps] == [12.0, 8.0, 8.0]
    # the separate models' checkpoint, whose step counts differ, loads into a new stack, which trains on as they do
    loaded, _ = synthetic_pair(own_models, tmp_path, cfg)
    loaded.load_state_dict(separate.state_dict())
    for agent in (loaded, separate):
        set_seed(2)
        drive(agent, 4)
    assert_same_state(loaded, separate, atol=tolerance, rtol=1e-5)


def synthetic_algorithm(name, tmp_path, *, stack_models):
    """MAPPO, IPPO, COMA, MFAC or VDAC over the test's agents, each with a policy of its own (critics of their own
    where the algorithm has them)."""
    from marlparts.agents import COMA, IPPO, MAPPO, MFAC, VDAC

    algorithm = {"MAPPO": MAPPO, "IPPO": IPPO, "COMA": COMA, "MFAC": MFAC, "VDAC": VDAC}[name]
    discrete = gymnasium.spaces.Discrete(3)
    set_seed(0)
    shared_critic = {"COMA": Value(observation_space=box(6 + 3 * 3 + 3), output_size=3),
                     "MFAC": Value(observation_space=box(4 + 3), output_size=3)}.get(name)

    def critic():
        if shared_critic is not None:
            return shared_critic
        return Value(observation_space=box(6), output_size=3) if name == "MAPPO" else Value(observation_space=box(4))

    models = {u: {"policy": Policy(observation_space=box(4), action_space=discrete), "value": critic()} for u in UIDS}
    cfg = algorithm.DEFAULT_CONFIG.copy()
    cfg.update(rollouts=4, learning_epochs=2, mini_batches=2, learning_rate=1e-2, stack_models=stack_models)
    cfg["experiment"].update(directory=str(tmp_path), checkpoint_interval=0, tensorboard=False, csv=False)
    return algorithm(possible_agents=UIDS, models=models, cfg=cfg,
                     memories={u: RandomMemory(memory_size=4, num_envs=2) for u in UIDS},
                     observation_spaces={u: box(4) for u in UIDS}, action_spaces={u: discrete for u in UIDS},
                     state_spaces={u: box(6) for u in UIDS})


@pytest.mark.parametrize("stack_models", [True, False], ids=["stacked", "separate"])
@pytest.mark.parametrize("name", ["MAPPO", "IPPO", "COMA", "MFAC", "VDAC"])
def test_a_model_whose_agent_sat_out_the_rollout_takes_no_step(tmp_path, monkeypatch, name, stack_models):
    """a2 acts in the first rollout (its optimizer has momentum), in none of the second: its models, their optimizer
    states and statistics are as they were, while the others train."""
    greedy_sampling(monkeypatch)
    agent = synthetic_algorithm(name, tmp_path, stack_models=stack_models)
    assert (len(agent.groups) == 1) == stack_models
    drive(agent, 4)
    before = copy.deepcopy(agent.state_dict()["modules"])
    drive(agent, 4, lambda t: {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.ones(2, 1, dtype=torch.bool),
                               "a2": torch.zeros(2, 1, dtype=torch.bool)})
    after = agent.state_dict()["modules"]
    own = [part for part in before if part.endswith("[a2]")]
    assert any(part.startswith("optimizer:policy") for part in own)
    for part in own:
        assert_same_part(before[part], after[part], part)
    assert not torch.equal(before["policy[a0]"]["net.0.weight"], after["policy[a0]"]["net.0.weight"])


def assert_same_part(first, second, where):
    """Two checkpoint parts (state dicts, nested) hold equal values."""
    if isinstance(first, torch.Tensor):
        assert torch.equal(first, second), where
    elif isinstance(first, dict):
        assert sorted(first, key=str) == sorted(second, key=str), where
        for key in first:
            assert_same_part(first[key], second[key], f"{where}/{key}")
    elif isinstance(first, (list, tuple)):
        assert len(first) == len(second), where
        for index, (x, y) in enumerate(zip(first, second)):
            assert_same_part(x, y, f"{where}/{index}")
    else:
        assert first == second, where


def test_with_a_gradient_scaler_a_stack_steps_its_members_as_separate_models_and_skips_non_finite_steps(
        tmp_path, monkeypatch):
    """Mixed precision's gradient scaler (on the CPU here): a member that sits out takes no step, the others step
    as separate models do, and a step on non-finite gradients is skipped for every member."""
    import contextlib

    greedy_sampling(monkeypatch)

    def active(t):
        return {"a0": torch.ones(2, 1, dtype=torch.bool), "a1": torch.ones(2, 1, dtype=torch.bool),
                "a2": torch.full((2, 1), t < 4)}

    stacked, separate = synthetic_pair(own_models, tmp_path, {"learning_epochs": 2, "mini_batches": 2})
    for agent in (stacked, separate):
        agent._grad_scaler = torch.amp.GradScaler("cpu")
        monkeypatch.setattr(agent, "autocast", contextlib.nullcontext)
        set_seed(1)
        drive(agent, 8, active)
    assert_same_state(stacked, separate, atol=1e-6, rtol=1e-6)
    record = stacked.groups[0].trained["policy"]
    assert record.stepping_members.tolist() == [True, True, False] and not record.member_state.uniform
    before = copy.deepcopy(stacked.state_dict()["modules"])
    scale = stacked._grad_scaler.get_scale()
    stacked.optimize([record], sum(parameter.sum() for parameter in record.model.parameters()) * float("inf"))
    assert stacked._grad_scaler.get_scale() == scale / 2
    after = stacked.state_dict()["modules"]
    for part in before:
        if part.startswith(("policy", "optimizer:policy")):
            assert_same_part(before[part], after[part], part)

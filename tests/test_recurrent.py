"""Recurrent MAPPO and IPPO: hidden states through collection and chunked updates, a memory task."""

import gymnasium
import pytest
import torch
from helpers import Policy, Value
from toy_envs import CountingEnv, CueEnv

from marlparts.agents import IPPO, MADDPG, MADDPG_DEFAULT_CONFIG, MAPPO, RecurrentIPPO, RecurrentMAPPO
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, RecurrentMixin, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import append_agent_id, joint_space


class RecurrentPolicy(RecurrentMixin, CategoricalMixin, Model):
    def __init__(self, hidden_size=16, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.encoder = mlp(self.num_observations, 16, hidden_sizes=())
        self.cell = torch.nn.GRUCell(16, hidden_size)
        self.head = mlp(hidden_size, self.num_actions, hidden_sizes=(), output_gain=0.01)

    def compute(self, inputs, role=""):
        output, hidden = self.recur(self.cell, torch.relu(self.encoder(inputs["observations"])), inputs)
        return self.head(output), {"hidden": hidden}


class RecurrentValue(RecurrentMixin, DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = 16
        self.encoder = mlp(self.num_observations, 16, hidden_sizes=())
        self.cell = torch.nn.GRUCell(16, 16)
        self.head = mlp(16, self.num_outputs, hidden_sizes=())

    def compute(self, inputs, role=""):
        output, hidden = self.recur(self.cell, torch.relu(self.encoder(inputs["observations"])), inputs)
        return self.head(output), {"hidden": hidden}


def build(env, algorithm="mappo", recurrent_policy=True, recurrent_critic=True, cfg=None, rollouts=16):
    """RecurrentMAPPO / RecurrentIPPO, or MAPPO / IPPO when neither model is recurrent."""
    uid = env.possible_agents[0]
    policy_class = RecurrentPolicy if recurrent_policy else Policy
    value_class = RecurrentValue if recurrent_critic else Value
    recurrent = recurrent_policy or recurrent_critic
    algorithm_class = {("mappo", True): RecurrentMAPPO, ("mappo", False): MAPPO, ("ippo", True): RecurrentIPPO,
                       ("ippo", False): IPPO}[algorithm, recurrent]
    policy = policy_class(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    if algorithm == "mappo" and (cfg or {}).get("agent_specific_values") == "one_hot":
        value = value_class(observation_space=append_agent_id(env.state_space, env.num_agents))
    elif algorithm == "mappo":
        value = value_class(observation_space=env.state_space, output_size=env.num_agents)
    else:
        value = value_class(observation_space=env.observation_space(uid))
    base = algorithm_class.DEFAULT_CONFIG.copy()
    base.update(rollouts=rollouts, learning_epochs=4, mini_batches=2, learning_rate=3e-3)
    if recurrent:
        base["sequence_length"] = 4
    base["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    base.update(cfg or {})
    kwargs = dict(possible_agents=env.possible_agents,
                  models={u: {"policy": policy, "value": value} for u in env.possible_agents},
                  memories={u: RandomMemory(memory_size=rollouts, num_envs=env.num_envs) for u in env.possible_agents},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=base)
    if algorithm == "mappo":
        return algorithm_class(state_spaces=env.state_spaces, **kwargs)
    return algorithm_class(**kwargs)


def success_rate(env, agent, steps):
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})
    trainer.train()
    return (trainer.eval(episodes=200)["mean_return"] + 1) / 2  # the return is +1 or -1 per agent


@pytest.mark.learning
@pytest.mark.parametrize("algorithm", ["mappo", "ippo"])
def test_recurrent_policies_remember_the_cue_and_feed_forward_ones_cannot(algorithm):
    set_seed(0)
    env = wrap_env(lambda: CueEnv(length=4), num_envs=16, seed=0)
    assert success_rate(env, build(env, algorithm), 1500) >= 0.95
    set_seed(0)
    env = wrap_env(lambda: CueEnv(length=4), num_envs=16, seed=0)
    assert success_rate(env, build(env, algorithm, recurrent_policy=False, recurrent_critic=False), 1500) <= 0.6


@pytest.mark.parametrize("algorithm,mode", [("mappo", "outputs"), ("mappo", "one_hot"), ("ippo", None)])
def test_the_update_replays_each_chunk_from_its_stored_hidden_states(algorithm, mode):
    # episodes of 5 steps cut into chunks of 4: episodes start inside chunks; agent_1 leaves at step 3
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=3, seed=0)
    cfg = {"learning_epochs": 1, "mini_batches": 1, "rollouts": 8}
    agent = build(env, algorithm, cfg=cfg if mode is None else {**cfg, "agent_specific_values": mode}, rollouts=8)
    losses = []
    original = agent.group_losses
    agent.group_losses = lambda group, chunks: losses.append(original(group, chunks)) or losses[-1]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    starts = memory.get_tensor_by_name("starts")
    steps = memory.get_tensor_by_name("observations")[..., 0]  # CountingEnv's step counter
    assert torch.equal(starts[:, :, 0], steps[:, :, 0] == 0)  # agent_0 starts afresh where its episode starts
    # agent_1 left at step 3: its state starts afresh once its episode has ended, is held while it is gone
    clock = steps[:, :, 0]  # agent_0's counter (agent_1's observations are zeros once it has left)
    assert torch.equal(starts[:, :, 1], (clock == 0) | (clock == 3))
    assert torch.equal(memory.get_tensor_by_name("waiting")[:, :, 1], clock >= 3)
    policy_hidden = memory.get_tensor_by_name("policy_hidden")
    assert (policy_hidden[starts] == 0).all() and (policy_hidden[:, :, 1][clock >= 3] == 0).all()
    assert abs(losses[0]["kl"].item()) < 1e-6, "the replayed chunks give the stored log-probabilities"
    # the critic's predictions at the first minibatch equal the stored old values (unclipped value loss)
    assert losses[0]["value"].item() == pytest.approx(_unclipped_value_loss(agent), rel=1e-4)


def _unclipped_value_loss(agent):
    memory = agent.groups[0].memory
    active = memory.get_tensor_by_name("active")
    error = (memory.get_tensor_by_name("old_values") - memory.get_tensor_by_name("value_targets")).square()
    return ((error * active).sum() / active.sum()).item()


def test_bad_recurrent_settings_are_named():
    env = wrap_env(lambda: CueEnv(length=4), num_envs=2, seed=0)
    with pytest.raises(ValueError, match=r"cfg\['sequence_length'\] must be a whole number >= 1, got 0"):
        build(env, cfg={"sequence_length": 0})
    with pytest.raises(TypeError, match=r"models\['agent_0'\]\['policy'\] is recurrent, but MAPPO does not train on "
                                        "sequences: use RecurrentMAPPO or RecurrentIPPO"):
        MAPPO(possible_agents=env.possible_agents, state_spaces=env.state_spaces,
              models={u: {"policy": RecurrentPolicy(observation_space=env.observation_space("agent_0"),
                                                    action_space=env.action_space("agent_0")),
                          "value": Value(observation_space=env.state_space, output_size=2)} for u in env.possible_agents},
              memories={u: RandomMemory(memory_size=16, num_envs=2) for u in env.possible_agents},
              observation_spaces=env.observation_spaces, action_spaces=env.action_spaces)
    with pytest.raises(ValueError, match=r"sequence_length'\] is 32 but cfg\['rollouts'\] is 16"):
        build(env, cfg={"sequence_length": 32})
    with pytest.raises(ValueError, match=r"sequence_length'\] is 5 but cfg\['rollouts'\] is 16"):
        build(env, cfg={"sequence_length": 5})
    from test_maddpg import Net

    critic = Net(observation_space=joint_space([*env.observation_spaces.values(), *env.action_spaces.values()]),
                 output_size=2)
    policy = RecurrentPolicy(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    with pytest.raises(TypeError, match=r"models\['agent_0'\]\['policy'\] is recurrent, but MADDPG does not train on"):
        MADDPG(possible_agents=env.possible_agents, models={u: {"policy": policy, "critic": critic} for u in env.possible_agents},
               memories={u: RandomMemory(memory_size=100, num_envs=2) for u in env.possible_agents},
               observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=MADDPG_DEFAULT_CONFIG.copy())


def test_hidden_states_of_the_wrong_size_are_named():
    env = wrap_env(lambda: CueEnv(length=4), num_envs=2, seed=0)
    agent = build(env)
    agent.groups[0].models["policy"].hidden_size = 8  # the cell returns 16 values
    with pytest.raises(ValueError, match="hidden_size 8.*hidden states of shape"):
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 2, "disable_progressbar": True}).train()


def test_hidden_states_restart_when_the_env_is_reset_at_a_rollout_boundary():
    # an env instance: evaluation runs on the training copies and cuts their episodes
    set_seed(0)
    env = wrap_env(CountingEnv(max_steps=50, leave_at=99), seed=0)
    agent = build(env, "ippo", rollouts=4, cfg={"mini_batches": 1})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True})
    trainer.train()  # exactly one rollout: the update leaves the memory at its start
    trainer.eval(episodes=1)
    trainer.cfg["timesteps"] = 1
    trainer.train()
    memory = agent.groups[0].memory
    assert memory.get_tensor_by_name("starts")[0].all()
    assert (memory.get_tensor_by_name("policy_hidden")[0] == 0).all()
    assert (memory.get_tensor_by_name("value_hidden")[0] == 0).all()


def test_a_truncated_episode_is_valued_from_the_critic_state_that_has_seen_its_last_observation(tmp_path):
    """V(final observation) of a time limit comes from the recurrent critic's hidden state after it read the
    step's own observation, as the next step's value would: h_{t+1} = cell(s_t, h_t), then V(s_final; h_{t+1}).
    """
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=99), num_envs=2, seed=0)
    agent = build(env, recurrent_policy=False, rollouts=8, cfg={"value_preprocessor": None, "learning_epochs": 1})
    ended = []
    original = agent.record_transition

    def record_transition(**step):
        if step["infos"].get("final_state") is not None and step["truncated"]["agent_0"].any():
            ended.append((agent.groups[0].memory.memory_index, step["infos"]["final_state"].clone()))
        original(**step)

    agent.record_transition = record_transition
    agent.update = lambda *args: None  # the stored rollout stays as collected
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    memory, critic = agent.groups[0].memory, agent.groups[0].models["value"]
    assert [index for index, _ in ended] == [3, 7]
    for index, final_state in ended:
        with torch.no_grad():
            _, _, seen = critic.act({"observations": memory.get_tensor_by_name("states")[index],
                                     "hidden": memory.get_tensor_by_name("value_hidden")[index, :, 0]})
            expected, _, _ = critic.act({"observations": final_state, "hidden": seen["hidden"]})
        stored = memory.get_tensor_by_name("final_values")[index, :, :, 0]
        assert torch.allclose(stored, expected, atol=1e-6), (stored, expected)


def test_a_critic_of_the_global_state_starts_afresh_with_the_episode_whatever_the_grouping_of_agents(tmp_path):
    """One recurrent critic of the global state shared by groups of one agent each (their policies differ): it reads
    the same states with the same episode starts for every group, so all keep the same hidden states, also while
    agent_1 has left the episode (its group must not reset the critic's state then).
    """
    set_seed(0)
    env = wrap_env(lambda: CountingEnv(max_steps=6, leave_at=2), num_envs=2, seed=0)
    uid = env.possible_agents[0]
    value = RecurrentValue(observation_space=env.state_space, output_size=env.num_agents)
    models = {u: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                  "value": value} for u in env.possible_agents}
    cfg = RecurrentMAPPO.DEFAULT_CONFIG.copy()
    cfg.update(rollouts=12, sequence_length=4, learning_epochs=1, stack_models=False)
    cfg["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    agent = RecurrentMAPPO(possible_agents=env.possible_agents, models=models,
                           memories={u: RandomMemory(memory_size=12, num_envs=2) for u in env.possible_agents},
                           observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                           state_spaces=env.state_spaces, cfg=cfg)
    assert [group.uids for group in agent.groups] == [["agent_0"], ["agent_1"], ["agent_2"]]
    agent.update = lambda *args: None
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 12, "disable_progressbar": True}).train()
    first, second, third = (group.memory for group in agent.groups)
    assert not second.get_tensor_by_name("active").all()  # agent_1 left the episodes
    assert torch.equal(first.get_tensor_by_name("value_hidden"), second.get_tensor_by_name("value_hidden"))
    assert torch.equal(first.get_tensor_by_name("value_hidden"), third.get_tensor_by_name("value_hidden"))
    assert not second.get_tensor_by_name("active")[4].any()  # row 4: mid-episode, agent_1 has left
    assert (second.get_tensor_by_name("value_hidden")[4] != 0).all()


# ----------------------------------------------------------------------------- turn-based play
TURNS = ["p0", "p1"]


def turns_played(first_observation, steps=5):
    """RecurrentIPPO (one recurrent policy of p0 and p1, per-agent recurrent critics) on ``steps`` synthetic steps of
    one env copy where p0 moves at even steps and p1 at odd ones; p0's observation at step 0 is ``first_observation``,
    every other observation the same from run to run. Returns the algorithm, its training untouched."""
    from helpers import box

    set_seed(0)
    space, actions = box(3), gymnasium.spaces.Discrete(2)
    policy = RecurrentPolicy(observation_space=space, action_space=actions)
    cfg = RecurrentIPPO.DEFAULT_CONFIG.copy()
    cfg.update(rollouts=8, sequence_length=4, learning_epochs=1, mini_batches=1)
    cfg["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    agent = RecurrentIPPO(possible_agents=TURNS, cfg=cfg,
                          models={u: {"policy": policy, "value": RecurrentValue(observation_space=space)} for u in TURNS},
                          memories={u: RandomMemory(memory_size=8, num_envs=1) for u in TURNS},
                          observation_spaces={u: space for u in TURNS}, action_spaces={u: actions for u in TURNS})
    agent.update = lambda *args: None
    agent.init({"timesteps": steps})
    generator = torch.Generator().manual_seed(7)
    observations = [{u: torch.randn(1, 3, generator=generator) for u in TURNS} for _ in range(steps + 1)]
    observations[0]["p0"] = first_observation

    def infos(t):
        return {"active": {"p0": torch.tensor([[t % 2 == 0]]), "p1": torch.tensor([[t % 2 == 1]])}}

    for t in range(steps):
        actions_taken = agent.act(observations[t], None, infos(t), t, steps)
        agent.record_transition(observations=observations[t], states=None, actions=actions_taken,
                                rewards={u: torch.zeros(1, 1) for u in TURNS}, next_observations=observations[t + 1],
                                next_states=None, terminated={u: torch.zeros(1, 1, dtype=torch.bool) for u in TURNS},
                                truncated={u: torch.zeros(1, 1, dtype=torch.bool) for u in TURNS}, infos=infos(t + 1),
                                timestep=t, timesteps=steps)
    return agent


def test_a_turn_based_agent_carries_its_hidden_state_from_one_of_its_turns_to_the_next():
    """p0 moves at steps 0, 2 and 4: what it reads at its third turn depends on what it saw at its first, and at each
    turn it reads the state its own previous turn left (not one reset, or advanced on the observations of its waits)."""
    runs = [turns_played(torch.zeros(1, 3)), turns_played(torch.full((1, 3), 3.0))]
    read = [agent.groups[0].memory.get_tensor_by_name("policy_hidden")[:, 0, 0] for agent in runs]  # p0's, per step
    assert not torch.allclose(read[0][4], read[1][4], atol=1e-4)
    agent = runs[1]
    memory, policy = agent.groups[0].memory, agent.groups[0].models["policy"]
    observations = memory.get_tensor_by_name("observations")[:, 0, 0]
    with torch.no_grad():
        for turn in (0, 2):  # the state p0's turn returned is what it reads at its next one
            _, _, outputs = policy.act({"observations": observations[turn:turn + 1], "hidden": read[1][turn:turn + 1]})
            assert torch.allclose(read[1][turn + 2], outputs["hidden"][0], atol=1e-6)
    assert not memory.get_tensor_by_name("starts")[1:].any()  # the episode started once, at step 0
    # p0's own critic row keeps its state across p1's turns too
    values = memory.get_tensor_by_name("value_hidden")[:, 0, 0]
    assert torch.equal(values[1], values[2]) and torch.equal(values[3], values[4])

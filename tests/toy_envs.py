"""Small PettingZoo envs (Parallel and AEC) written for the tests: deterministic and fast."""

import os

import gymnasium
import numpy as np
from pettingzoo import AECEnv, ParallelEnv


class CountingEnv(ParallelEnv):
    """Three agents; observation = [step, agent index, last action]; reward = action taken.

    ``agent_1`` leaves the episode at step ``leave_at`` (terminated, or truncated with
    ``leave_by="truncated"``); the episode is truncated for everyone at ``max_steps``. With ``masked=True`` observations are
    ``{"observation", "action_mask"}`` dicts where action 0 is forbidden on odd steps.
    ``nan_at`` puts a NaN into ``agent_2``'s observation at that step; ``raise_at`` raises in step.
    """

    metadata = {"name": "counting_v0", "render_modes": ["rgb_array"]}

    def __init__(self, max_steps=5, leave_at=3, masked=False, nan_at=None, raise_at=None, nan_reward_at=None,
                 render_mode=None, leave_by="terminated"):
        self.possible_agents = ["agent_0", "agent_1", "agent_2"]
        self.max_steps, self.leave_at, self.masked = max_steps, leave_at, masked
        self.nan_at, self.raise_at, self.nan_reward_at = nan_at, raise_at, nan_reward_at
        self.render_mode = render_mode
        self.leave_by = leave_by
        self.agents = []
        self.t = 0
        self.seed_used = None

    def observation_space(self, agent):
        box = gymnasium.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        if self.masked:
            return gymnasium.spaces.Dict({"observation": box, "action_mask": gymnasium.spaces.MultiBinary(4)})
        return box

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(4)

    def _obs(self, agent, action=0.0):
        value = np.array([self.t, self.possible_agents.index(agent), action], dtype=np.float32)
        if self.nan_at is not None and self.t == self.nan_at and agent == "agent_2":
            value[0] = np.nan
        if self.masked:
            mask = np.ones(4, dtype=np.int8)
            mask[0] = 0 if self.t % 2 == 1 else 1
            return {"observation": value, "action_mask": mask}
        return value

    def reset(self, seed=None, options=None):
        self.seed_used = seed
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        if self.raise_at is not None and self.t == self.raise_at:
            raise RuntimeError("simulated failure")
        obs = {a: self._obs(a, float(actions[a])) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        if self.nan_reward_at is not None and self.t == self.nan_reward_at:
            rewards["agent_0"] = float("inf")
        leaves = {a: (a == "agent_1" and self.t == self.leave_at) for a in self.agents}
        by_truncation = self.leave_by == "truncated"
        terminated = {a: leaves[a] and not by_truncation for a in self.agents}
        truncated = {a: self.t >= self.max_steps or (leaves[a] and by_truncation) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, infos

    def state(self):
        return np.array([self.t, len(self.agents)], dtype=np.float32)

    def render(self):
        return np.full((4, 4, 3), self.t, dtype=np.uint8)


class ContinuousEnv(CountingEnv):
    """CountingEnv with a ``Box(-1, 1, (2,))`` action; reward = first action component."""

    def action_space(self, agent):
        return gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def step(self, actions):
        assert all(np.all(np.abs(a) <= 1.0) for a in actions.values()), "actions outside the Box"
        return super().step({a: float(v[0]) for a, v in actions.items()})


class CoinFlipEnv(ParallelEnv):
    """One agent; each episode is, with probability 1/2, one step long with return 0, or ten steps
    long with reward 1 per step (return 10). The expected return is 5 whatever the policy does.
    """

    metadata = {"name": "coin_flip_v0"}

    def __init__(self):
        self.possible_agents = ["agent_0"]
        self.agents = []
        self.rng = np.random.default_rng()
        self.length = 0
        self.t = 0

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.length = 10 if self.rng.random() < 0.5 else 1
        self.t = 0
        self.agents = list(self.possible_agents)
        return {"agent_0": np.array([0.0, self.length], dtype=np.float32)}, {"agent_0": {}}

    def step(self, actions):
        self.t += 1
        reward = 1.0 if self.length == 10 else 0.0
        done = self.t >= self.length
        obs = {"agent_0": np.array([self.t, self.length], dtype=np.float32)}
        self.agents = [] if done else list(self.possible_agents)
        return obs, {"agent_0": reward}, {"agent_0": False}, {"agent_0": done}, {"agent_0": {}}


class CueEnv(ParallelEnv):
    """A memory task: each agent sees a cue (+1 or -1) at the first step only, and is rewarded at the
    last step of ``length`` for the action that matches it (+1) or not (-1). Without memory the last
    step looks the same whatever the cue, so no feed-forward policy beats chance (mean return 0).

    The task ends there (terminated): the observation carries the step, so the end is part of the task,
    and a state after it is never visited. Marked as a time limit, every episode would be bootstrapped
    from that never-trained final observation, whose value a recurrent critic extrapolates from its
    hidden state: on some seeds the values then grew without bound (to 1e8 within 10k steps), and the
    rewards of +-1 drowned in the float32 rounding of the advantages.
    """

    metadata = {"name": "cue_v0"}

    def __init__(self, length=4):
        self.possible_agents = ["agent_0", "agent_1"]
        self.length = length
        self.agents = []
        self.rng = np.random.default_rng()
        self.cues = {}
        self.t = 0

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def _obs(self, agent):
        cue = self.cues[agent] if self.t == 0 else 0.0
        return np.array([cue, self.t / self.length], dtype=np.float32)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        self.cues = {agent: float(self.rng.choice([-1.0, 1.0])) for agent in self.agents}
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        last = self.t >= self.length
        rewards = {a: (1.0 if (actions[a] == 1) == (self.cues[a] > 0) else -1.0) if last else 0.0 for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        terminated = {a: last for a in self.agents}
        truncated = {a: False for a in self.agents}
        if last:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def start_aec_game(env: AECEnv) -> None:
    """Every player back in ``env``'s game, with PettingZoo's per-player bookkeeping of an AEC env cleared."""
    env.agents = list(env.possible_agents)
    env.rewards = dict.fromkeys(env.agents, 0.0)
    env._cumulative_rewards = dict.fromkeys(env.agents, 0.0)
    env.terminations = dict.fromkeys(env.agents, False)
    env.truncations = dict.fromkeys(env.agents, False)
    env.infos = {agent: {} for agent in env.agents}


class CallAndAnswerEnv(AECEnv):
    """A turn-based (AEC) game of two moves where the right play is known exactly.

    ``caller`` picks 0 or 1; then ``answerer`` picks 0 or 1 and the game ends. The caller's reward
    arrives on the answerer's move, while the caller waits: +1 if it called 1, else -1. The answerer
    gets +1 for repeating the call, else 0. Observations are ``[caller to move, answerer to move, the
    call]`` with an action mask; ``forbid_all`` gives the answerer a mask with no legal action, and
    ``grow_at_reset`` makes the observation space larger at the reset after the first.
    """

    metadata = {"name": "call_and_answer_v0", "is_parallelizable": False}

    def __init__(self, forbid_all=False, grow_at_reset=False):
        super().__init__()
        self.possible_agents = ["caller", "answerer"]
        self.forbid_all, self.grow_at_reset = forbid_all, grow_at_reset
        self.size, self.resets = 3, 0

    def observation_space(self, agent):
        return gymnasium.spaces.Dict({"observation": gymnasium.spaces.Box(0.0, 1.0, shape=(self.size,)),
                                      "action_mask": gymnasium.spaces.MultiBinary(2)})

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def observe(self, agent):
        value = np.zeros(self.size, dtype=np.float32)
        value[0], value[1] = self.agent_selection == "caller", self.agent_selection == "answerer"
        value[2] = 0.0 if self.call is None else float(self.call)
        legal = 0 if (self.forbid_all and agent == "answerer") else 1
        return {"observation": value, "action_mask": np.full(2, legal, dtype=np.int8)}

    def reset(self, seed=None, options=None):
        self.resets += 1
        if self.grow_at_reset and self.resets > 2:  # the first reset is the wrapper's probe
            self.size = 4
        start_aec_game(self)
        self.agent_selection, self.call = "caller", None

    def step(self, action):
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[self.agent_selection] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        if self.agent_selection == "caller":
            self.call = int(action)
            self.agent_selection = "answerer"
        else:
            self.rewards["caller"] = 1.0 if self.call == 1 else -1.0
            self.rewards["answerer"] = 1.0 if int(action) == self.call else 0.0
            self.terminations = dict.fromkeys(self.agents, True)
            self.agent_selection = "caller"
        self._accumulate_rewards()


class EliminationEnv(AECEnv):
    """A turn-based (AEC) game where the ``eliminated`` players are out after the first move and the others play on.

    Players move in turn (``first``, ``second``, then the ``eliminated``: ``("out",)`` by default); the first move
    terminates the eliminated (reward -1 each), whom PettingZoo's dead steps then remove, one after the other,
    before ``second`` moves. The game ends after ``length`` moves. Each
    observation is ``[moves so far, 1 if it is this player's turn]`` with an action mask that allows action 1
    only to the player whose turn it is (action 0 always).
    """

    metadata = {"name": "elimination_v0", "is_parallelizable": False}

    def __init__(self, length=4, eliminated=("out",)):
        super().__init__()
        self.possible_agents = ["first", "second", *eliminated]
        self.eliminated = list(eliminated)
        self.length = length

    def observation_space(self, agent):
        return gymnasium.spaces.Dict({"observation": gymnasium.spaces.Box(0.0, 100.0, shape=(2,)),
                                      "action_mask": gymnasium.spaces.MultiBinary(2)})

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def observe(self, agent):
        to_move = agent == self.agent_selection
        return {"observation": np.array([self.moves, float(to_move)], dtype=np.float32),
                "action_mask": np.array([1, int(to_move)], dtype=np.int8)}

    def reset(self, seed=None, options=None):
        start_aec_game(self)
        self.agent_selection, self.moves = "first", 0

    def step(self, action):
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            self._was_dead_step(action)
            return
        mover = self.agent_selection
        self._cumulative_rewards[mover] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self.moves += 1
        if self.moves == 1:
            for agent in self.eliminated:
                self.terminations[agent], self.rewards[agent] = True, -1.0
        if self.moves >= self.length:
            self.terminations = dict.fromkeys(self.agents, True)
        live = [agent for agent in self.agents if not self.terminations[agent]]
        self.agent_selection = "second" if mover == "first" and "second" in live else "first"
        self._accumulate_rewards()
        self._deads_step_first()


class FlakyEnv(CountingEnv):
    """CountingEnv (5 steps, nobody leaves) whose copies fail on purpose, and whose observations name the
    episode: ``[episode id, step, agent index]``, the id unique among the episodes of this process.

    The copy playing episode ``fail_episode`` raises at step ``fail_at`` (``how="raise"``), or ends its
    process (``how="exit"``, to kill a worker) if it is the first to create the file ``marker``. The reset
    after episode ``fail_reset_of`` raises, and every reset with ``reset_fails``.
    """

    episodes_started = 0
    failed_episode = None

    def __init__(self, fail_episode=None, fail_at=3, how="raise", marker=None, reset_fails=False,
                 fail_reset_of=None):
        super().__init__(max_steps=5, leave_at=-1)
        self.fail_episode, self.fail_at, self.how, self.marker = fail_episode, fail_at, how, marker
        self.reset_fails, self.fail_reset_of = reset_fails, fail_reset_of
        self.episode = None

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)

    def _obs(self, agent, action=0.0):
        return np.array([self.episode, self.t, self.possible_agents.index(agent)], dtype=np.float32)

    def reset(self, seed=None, options=None):
        if self.reset_fails or (self.episode is not None and self.episode == self.fail_reset_of):
            raise RuntimeError("simulated reset failure")
        FlakyEnv.episodes_started += 1
        self.episode = FlakyEnv.episodes_started
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.episode == self.fail_episode and self.t + 1 == self.fail_at:
            FlakyEnv.failed_episode = self.episode
            if self.how == "exit":
                try:  # only the first copy to get here creates the marker, and ends its process
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    pass
                else:
                    os._exit(3)
            else:
                raise RuntimeError(f"simulated failure in episode {self.episode}")
        return super().step(actions)


class LeaveBeforeTheStormEnv(ParallelEnv):
    """Agents that leave mid-episode, with a known best play. Six steps; observation ``[t / 5, t % 2, agent
    index]``.

    ``swimmer`` either stays (0), paid 1 for the step, or leaves (1), paid nothing, its episode ended
    (terminated). A storm comes at step 3: a swimmer still in the water at the end of that step is paid
    -10 and its episode ends. The best play is to stay for steps 0, 1 and 2 and leave at step 3, a
    return of 3. ``keeper`` stays to the end (the game ends after step 5) and is paid 1 at each step where
    its action is ``t % 2``: a best return of 6, earned partly after the swimmer has left.
    """

    metadata = {"name": "leave_before_the_storm_v0"}

    def __init__(self):
        self.possible_agents = ["swimmer", "keeper"]
        self.agents, self.t = [], 0

    def observation_space(self, agent):
        return gymnasium.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def _observations(self):
        return {a: np.array([self.t / 5, self.t % 2, self.possible_agents.index(a)], dtype=np.float32)
                for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions):
        rewards = {"keeper": float(int(actions["keeper"]) == self.t % 2)}
        terminated = {"keeper": self.t == 5}  # the game is over: nothing to bootstrap from
        if "swimmer" in self.agents:
            leaves, storm = int(actions["swimmer"]) == 1, self.t == 3
            rewards["swimmer"] = 0.0 if leaves else (-10.0 if storm else 1.0)
            terminated["swimmer"] = leaves or storm
        truncated = dict.fromkeys(self.agents, False)
        self.t += 1
        observations = self._observations()
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return observations, rewards, terminated, truncated, infos


class TupleSpacesEnv(gymnasium.Env):
    """A Gymnasium multi-agent env of the EPyMARL convention: two agents, ``Tuple`` spaces, a list of rewards.

    Observation of agent ``i``: ``[step, i]``; reward of agent ``i``: its action + ``i``. ``done`` (one bool) comes
    at step ``limit``, as LBF and RWARE end their episodes at their own limit. ``per_agent_done``: ``done`` is a
    list, and ``agent_1`` is done from step ``leave_at`` on. ``old_api``: ``step`` returns ``(obs, rewards, done,
    info)``. ``shared_reward``: one number for both agents. ``masks``: ``info["action_mask"]`` forbids action 0 on
    odd steps. ``with_state``: ``state()`` returns ``[step, 10 * step]``. Actions received are kept in ``received``.
    """

    def __init__(self, limit=4, per_agent_done=False, leave_at=2, old_api=False, shared_reward=False, masks=False,
                 with_state=False):
        self.observation_space = gymnasium.spaces.Tuple([gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)] * 2)
        self.action_space = gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(3)] * 2)
        self.limit, self.per_agent_done, self.leave_at = limit, per_agent_done, leave_at
        self.old_api, self.shared_reward, self.masks = old_api, shared_reward, masks
        if with_state:
            self.state = lambda: np.array([self.t, 10 * self.t], dtype=np.float32)
        self.t = 0
        self.received = []

    def _obs(self):
        return tuple(np.array([self.t, i], dtype=np.float32) for i in range(2))

    def _info(self):
        if not self.masks:
            return {}
        allowed = np.array([self.t % 2 == 0, True, True])
        return {"action_mask": [allowed, allowed], "t": self.t}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, actions):
        self.received.append(tuple(int(a) for a in actions))
        self.t += 1
        rewards = float(sum(actions)) if self.shared_reward else [float(a) + i for i, a in enumerate(actions)]
        done = self.t >= self.limit
        if self.per_agent_done:
            done = [done, done or self.t >= self.leave_at]
        if self.old_api:
            return self._obs(), rewards, done, self._info()
        return self._obs(), rewards, done, False, self._info()

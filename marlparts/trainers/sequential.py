"""A trainer that steps the environment and the algorithms one after another in one process."""

import time
from typing import Any, Dict, List

import torch
import tqdm

from marlparts.trainers.base import EpisodeStatistics, Trainer

SEQUENTIAL_TRAINER_DEFAULT_CONFIG: Dict[str, Any] = {
    "timesteps": 100_000,          # vectorized steps to train for (each steps every env copy)
    "disable_progressbar": False,  # hide the progress bar
    "eval_episodes": 100,          # episodes that eval() collects
    "stochastic_evaluation": False,  # eval() samples actions instead of taking the greedy ones
    "close_environment_at_exit": False,
}


class SequentialTrainer(Trainer):
    """The loop: act, ``env.step``, ``record_transition``, ``post_interaction``.

    The progress bar shows env steps per second (env copies × steps) and the mean return
    over agents of recently finished episodes; the same returns go to each algorithm's
    tracker. The trainer holds no algorithm logic.
    """

    DEFAULT_CONFIG = SEQUENTIAL_TRAINER_DEFAULT_CONFIG

    def train(self) -> None:
        """Train for ``cfg["timesteps"]`` vectorized steps; metrics are flushed even if a step fails."""
        env, timesteps = self.env, int(self.cfg["timesteps"])
        for agent in self.agents:
            agent.init(self.cfg)
            agent.set_mode("train")
        statistics = EpisodeStatistics(env.possible_agents, env.num_envs, env.device)
        observations, infos = env.reset()
        states = env.state()
        recent: List[float] = []
        start = time.perf_counter()
        bar = tqdm.tqdm(range(timesteps), disable=self.cfg["disable_progressbar"], unit="step", smoothing=0.1)
        try:
            for timestep in bar:
                for agent in self.agents:
                    agent.pre_interaction(timestep, timesteps)
                actions = self._act(observations, states, infos, timestep, timesteps)
                next_observations, rewards, terminated, truncated, next_infos = env.step(actions)
                next_states = env.state()
                for agent in self.agents:
                    agent.record_transition(observations=observations, states=states, actions=actions,
                                            rewards=rewards, next_observations=next_observations,
                                            next_states=next_states, terminated=terminated, truncated=truncated,
                                            infos=next_infos, timestep=timestep, timesteps=timesteps)
                finished = statistics.step(rewards, terminated, truncated, next_infos)
                if finished.shape[0]:
                    self._track_returns(finished)
                    recent = (recent + finished.mean(dim=1).tolist())[-100:]
                for agent in self.agents:
                    agent.post_interaction(timestep, timesteps)
                observations, states, infos = next_observations, next_states, next_infos
                if timestep % 200 == 0 and recent:
                    rate = (timestep + 1) * env.num_envs / (time.perf_counter() - start)
                    bar.set_postfix(env_steps_per_s=f"{rate:.0f}", mean_return=f"{sum(recent) / len(recent):.2f}")
        finally:
            bar.close()
            for agent in self.agents:
                if agent.tracker is not None:
                    agent.tracker.write(agent.timestep)
            if self.cfg["close_environment_at_exit"]:
                env.close()

    def _track_returns(self, finished: torch.Tensor) -> None:
        for agent, columns in zip(self.agents, self.agent_columns):
            agent.track_episode_returns(finished[:, columns])

    def eval(self, episodes: int = None) -> Dict[str, Any]:
        """Run ``episodes`` fresh episodes (``cfg["eval_episodes"]`` by default), greedy unless
        ``cfg["stochastic_evaluation"]``; nothing is stored or learned.

        Returns:
            A dict: ``"mean_return"`` (mean over episodes and agents), ``"returns"`` (agent id to
            its mean) and ``"episodes"`` (the number collected).
        """
        env = self.env
        episodes = int(episodes or self.cfg["eval_episodes"])
        for agent in self.agents:
            agent.set_mode("eval")
            agent.stochastic_evaluation = bool(self.cfg["stochastic_evaluation"])
        statistics = EpisodeStatistics(env.possible_agents, env.num_envs, env.device)
        observations, infos = env.reset()
        states = env.state()
        collected: List[torch.Tensor] = []
        count = 0
        try:
            while count < episodes:
                actions = self._act(observations, states, infos, 0, 0)
                observations, rewards, terminated, truncated, infos = env.step(actions)
                states = env.state()
                finished = statistics.step(rewards, terminated, truncated, infos)
                if finished.shape[0]:
                    collected.append(finished)
                    count += finished.shape[0]
        finally:
            for agent in self.agents:
                agent.set_mode("train")
        returns = torch.cat(collected)[:episodes]
        per_agent = returns.mean(dim=0).tolist()
        return {"mean_return": returns.mean().item(), "returns": dict(zip(env.possible_agents, per_agent)),
                "episodes": int(returns.shape[0])}

"""How fast the MAgent2 battle example could train if its MFQ and MFAC were straight-line PyTorch.

    python benchmarks/straight_line_battle.py --output benchmarks/results/straight_line_battle.json

The counterpart of ``straight_line_ppo.py`` for ``examples/magent2/battle_mfq_vs_mfac.py`` (12 against 12, 8
copies): one flat loop, written for this one configuration, that does no more than the example's two algorithms
must do per env step in eager PyTorch, on copies of the example's own networks and with its settings.

- Red, MFQ: each agent's utilities ``Q(o, ā)`` of its observation and the mean of its living teammates' last
  actions; Boltzmann actions with uniformly random ones at the example's epsilon schedule; the transition in
  a replay of 1000 vectorized steps; every ``update_interval`` steps after ``learning_starts``, one gradient
  step on ``batch_size`` sampled (step, copy) pairs: the TD target ``r + γ Σ_a π(a|o', ā') Q'(o', ā', a)``
  of the online Boltzmann policy and the target network, the masked squared error, the gradient norm
  clipped, one fused Adam step, the target network averaged towards the online one.
- Blue, MFAC: a categorical policy sampled per agent; the rollout's observations, actions, flags and living
  agents; the expected ``Q`` of the final observations where copies were truncated; every ``rollouts`` steps
  one pass of the critic and the policy over the rollout, the advantages ``Q(o, ā)[u] − Σ_a π(a|o) Q(o, ā)[a]``
  and the TD(λ) returns of ``Q(o, ā)[u]``; ``learning_epochs`` passes of minibatches of the critic's squared
  error and one pass of the policy's ``−A log π`` and entropy bonus, each step clipped and a fused Adam step;
  a running scale of the returns (in place of PopArt, which also rescales the critic's last layer).

It leaves out what the library does for generality (checks, logging, episode statistics, evaluations, the
trainer's bookkeeping), so, as in ``straight_line_ppo.py``, its rate as a share of env-only stepping estimates
how far eager PyTorch on one thread takes the example's algorithms with nothing around them. Three workloads are timed in
alternating chunks of ``--chunk`` vectorized steps after a warm-up that runs both algorithms' first updates and
one chunk of each under PyTorch's flop counter (their matrix-product work, which should be the same):
the example's trainer, this loop, and env-only stepping of a third env with uniform random actions.
"""

import argparse
import copy
import json
import pathlib
import sys
import tempfile
from typing import Any, Callable, Dict, List

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples" / "magent2"))

import battle_mfq_vs_mfac as example  # noqa: E402  (the example's builders, without running its main)
from straight_line_ppo import RunningScale, clipped_step, compared, gae  # noqa: E402
from throughput import count_flop, interleaved_many  # noqa: E402

from marlparts.agents.common.losses import masked_mean  # noqa: E402
from marlparts.agents.common.mean_field import others_mean_actions  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402
from marlparts.utils.agent_tensors import stack_agents, unstack_agents  # noqa: E402


def mean_of_others(actions: torch.Tensor, active: torch.Tensor, count: int) -> torch.Tensor:
    """``(rows, agents, count)``: each agent's mean one-hot of its living teammates' ``actions`` ``(rows, agents)``."""
    one_hot = F.one_hot(actions, count).float() * active.unsqueeze(-1)
    return others_mean_actions(one_hot.flatten(1), torch.arange(actions.shape[1]), count)


class StraightLineMFQ:
    """The red team's MFQ, one utility network shared by the team's agents."""

    def __init__(self, algorithm: Any, copies: int) -> None:
        cfg, self.cfg = algorithm.cfg, algorithm.cfg
        self.q = copy.deepcopy(algorithm.models[algorithm.possible_agents[0]]["q"].net)
        self.target = copy.deepcopy(self.q)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=cfg["learning_rate"], fused=True)
        self.actions = algorithm.actions
        self.agents, self.copies = len(algorithm.possible_agents), copies
        self.width = self.q[0].in_features - self.actions
        size = 1000  # the example's replay memory, in vectorized steps
        shape = (size, copies, self.agents)
        self.observations, self.next_observations = torch.zeros(shape + (self.width,)), torch.zeros(shape + (self.width,))
        self.means, self.next_means = torch.zeros(shape + (self.actions,)), torch.zeros(shape + (self.actions,))
        self.taken, self.rewards = torch.zeros(shape, dtype=torch.long), torch.zeros(shape)
        self.active, self.next_active = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)
        self.size, self.stored, self.previous = size, 0, torch.zeros(copies, self.agents, self.actions)

    def epsilon(self) -> float:
        """The rate of random actions at the stored step (linear decay)."""
        exploration = self.cfg["exploration"]
        progress = min(self.stored / exploration["timesteps"], 1.0)
        return exploration["initial_epsilon"] + (exploration["final_epsilon"] - exploration["initial_epsilon"]) * progress

    @torch.no_grad()
    def act(self, observations: torch.Tensor, active: torch.Tensor, started: torch.Tensor) -> torch.Tensor:
        """Boltzmann actions ``(copies, agents)`` with random ones at rate epsilon; remembers the mean actions."""
        self.mean = torch.where(started.reshape(-1, 1, 1), 0.0, self.previous)
        utilities = self.q(torch.cat([observations, self.mean], dim=-1))
        actions = torch.multinomial(torch.softmax(utilities / self.cfg["temperature"], -1).flatten(0, 1), 1)
        actions = actions.reshape(self.copies, self.agents)
        random = torch.randint(0, self.actions, actions.shape)
        actions = torch.where(torch.rand(actions.shape) < self.epsilon(), random, actions)
        self.previous = mean_of_others(actions, active, self.actions)
        return actions

    def store(self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, active: torch.Tensor,
              next_observations: torch.Tensor, next_active: torch.Tensor) -> None:
        """One vectorized transition; then a gradient step where the schedule has one."""
        index = self.stored % self.size
        self.observations[index], self.means[index], self.taken[index] = observations, self.mean, actions
        self.rewards[index], self.active[index] = rewards, active
        self.next_observations[index], self.next_means[index], self.next_active[index] = \
            next_observations, self.previous, next_active
        self.stored += 1
        if self.stored >= self.cfg["learning_starts"] and self.stored % self.cfg["update_interval"] == 0:
            self.gradient_step()

    def gradient_step(self) -> None:
        """One TD step on ``batch_size`` sampled (step, copy) pairs; the target network averaged towards the online one."""
        filled = min(self.stored, self.size)
        steps = torch.randint(0, filled, (self.cfg["batch_size"],))
        copies = torch.randint(0, self.copies, (self.cfg["batch_size"],))
        batch = [tensor[steps, copies] for tensor in (self.observations, self.means, self.taken, self.rewards,
                                                       self.active, self.next_observations, self.next_means,
                                                       self.next_active)]
        observations, means, taken, rewards, active, next_observations, next_means, next_active = batch
        chosen = self.q(torch.cat([observations, means], dim=-1)).gather(-1, taken.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            following = torch.cat([next_observations, next_means], dim=-1)
            policy = torch.softmax(self.q(following) / self.cfg["temperature"], dim=-1)
            value = (policy * self.target(following)).sum(-1)
            targets = rewards + self.cfg["discount_factor"] * next_active * value
        clipped_step(masked_mean((chosen - targets).square(), active), self.optimizer, list(self.q.parameters()),
                     self.cfg["grad_norm_clip"])
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.q.parameters()):
                target.lerp_(online, self.cfg["polyak"])


class StraightLineMFAC:
    """The blue team's MFAC, one policy and one critic shared by the team's agents."""

    def __init__(self, algorithm: Any, copies: int) -> None:
        cfg, self.cfg = algorithm.cfg, algorithm.cfg
        models = algorithm.models[algorithm.possible_agents[0]]
        self.policy, self.critic = copy.deepcopy(models["policy"].net), copy.deepcopy(models["value"].net)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg["learning_rate"], fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg["learning_rate"], fused=True)
        self.actions = int(algorithm.action_counts[0])
        self.agents, self.copies, self.rollouts = len(algorithm.possible_agents), copies, int(cfg["rollouts"])
        width = self.policy[0].in_features
        shape = (self.rollouts, copies, self.agents)
        self.observations = torch.zeros(shape + (width,))
        self.taken, self.rewards = torch.zeros(shape, dtype=torch.long), torch.zeros(shape)
        self.active, self.terminated = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)
        self.truncated, self.final_values = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape)
        self.stored, self.return_scale = 0, RunningScale(1)

    @torch.no_grad()
    def act(self, observations: torch.Tensor) -> torch.Tensor:
        """Actions ``(copies, agents)`` sampled from the policy."""
        probabilities = torch.softmax(self.policy(observations), dim=-1)
        return torch.multinomial(probabilities.flatten(0, 1), 1).reshape(self.copies, self.agents)

    @torch.no_grad()
    def expected_values(self, observations: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """``Σ_a π(a|o) Q(o, ā, a)`` in return units, the teammates' actions drawn from the policy."""
        probabilities = torch.softmax(self.policy(observations), dim=-1)
        drawn = torch.multinomial(probabilities.flatten(0, 1), 1).reshape(observations.shape[:2])
        q = self.critic(torch.cat([observations, mean_of_others(drawn, active, self.actions)], dim=-1))
        return (probabilities * self.return_scale.unscale(q)).sum(-1)

    def store(self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, active: torch.Tensor,
              terminated: torch.Tensor, truncated: torch.Tensor, final_observations: torch.Tensor,
              next_observations: torch.Tensor, next_active: torch.Tensor) -> None:
        """One vectorized step of the rollout; the update after the rollout's last."""
        t = self.stored
        self.observations[t], self.taken[t], self.rewards[t] = observations, actions, rewards
        self.active[t], self.terminated[t], self.truncated[t] = active, terminated, truncated
        if bool(truncated.any()):
            self.final_values[t] = torch.where(truncated, self.expected_values(final_observations,
                                                                               active & ~terminated), 0.0)
        else:
            self.final_values[t].zero_()
        self.stored += 1
        if self.stored == self.rollouts:
            self.update(self.expected_values(next_observations, next_active))
            self.stored = 0

    def update(self, last_values: torch.Tensor) -> None:
        """Counterfactual advantages and TD(λ) targets; the critic's passes, then the policy's."""
        rows = self.observations.flatten(0, 1)                                    # (T E, agents, width)
        taken, active = self.taken.flatten(0, 1), self.active.flatten(0, 1)
        inputs = torch.cat([rows, mean_of_others(taken, active, self.actions)], dim=-1)
        with torch.no_grad():
            q = self.return_scale.unscale(self.critic(inputs))
            chosen = q.gather(-1, taken.unsqueeze(-1)).squeeze(-1)
            baseline = (torch.softmax(self.policy(rows), dim=-1) * q).sum(-1)
            returns = self.td_lambda(chosen.reshape(self.rewards.shape), last_values).flatten(0, 1)
        advantages = chosen - baseline
        targets = (returns - self.return_scale.mean) / self.return_scale.std()
        samples = rows.shape[0]
        for _ in range(self.cfg["learning_epochs"]):
            for indexes in torch.randperm(samples).chunk(self.cfg["mini_batches"]):
                predicted = self.critic(inputs[indexes]).gather(-1, taken[indexes].unsqueeze(-1)).squeeze(-1)
                clipped_step(masked_mean((predicted - targets[indexes]).square(), active[indexes]),
                             self.critic_optimizer, list(self.critic.parameters()), self.cfg["grad_norm_clip"])
        for indexes in torch.randperm(samples).chunk(self.cfg["mini_batches"]):
            log_p = torch.log_softmax(self.policy(rows[indexes]), dim=-1)
            log_prob = log_p.gather(-1, taken[indexes].unsqueeze(-1)).squeeze(-1)
            entropy = -(log_p.exp() * log_p).sum(-1)
            loss = masked_mean(-advantages[indexes] * log_prob - self.cfg["entropy_loss_scale"] * entropy,
                               active[indexes])
            clipped_step(loss, self.policy_optimizer, list(self.policy.parameters()), self.cfg["grad_norm_clip"])
        self.return_scale.take_in(returns[active].reshape(-1, 1))
        self.return_scale.merge()

    def td_lambda(self, values: torch.Tensor, last_values: torch.Tensor) -> torch.Tensor:
        """TD(λ) returns of ``values`` ``(T, copies, agents)`` with time limits bootstrapped from the final values."""
        return values + gae(rewards=self.rewards, values=values, last_values=last_values,
                            final_values=self.final_values, terminated=self.terminated, truncated=self.truncated,
                            gamma=self.cfg["discount_factor"], lam=self.cfg["gae_lambda"])


class StraightLineBattle:
    """Both teams trained on one env, step by step."""

    def __init__(self, env: Any, red: Any, blue: Any) -> None:
        self.env, self.red_uids, self.blue_uids = env, list(red.possible_agents), list(blue.possible_agents)
        self.red, self.blue = StraightLineMFQ(red, env.num_envs), StraightLineMFAC(blue, env.num_envs)
        observations, infos = env.reset()
        self.observations, self.infos = observations, infos
        self.started = torch.ones(env.num_envs, dtype=torch.bool)

    def team(self, tensors: Any, uids: List[str]) -> torch.Tensor:
        """The team's columns of per-agent tensors, ``(copies, agents, ...)`` with a width of 1 squeezed."""
        stacked = stack_agents(tensors, uids)
        return stacked.squeeze(-1) if stacked.shape[-1] == 1 else stacked

    def step(self, n: int) -> None:
        """``n`` vectorized steps of both teams' acting, storing and updates."""
        for _ in range(n):
            red_observations, blue_observations = (self.team(self.observations, uids)
                                                   for uids in (self.red_uids, self.blue_uids))
            red_active, blue_active = (self.team(self.infos["active"], uids).bool()
                                       for uids in (self.red_uids, self.blue_uids))
            red_actions = self.red.act(red_observations, red_active, self.started)
            blue_actions = self.blue.act(blue_observations)
            actions = {**unstack_agents(red_actions.unsqueeze(-1), self.red_uids),
                       **unstack_agents(blue_actions.unsqueeze(-1), self.blue_uids)}
            observations, rewards, terminated, truncated, infos = self.env.step(actions)
            ended = infos["episode_end"].reshape(-1)
            final = infos.get("final_observation", observations)
            red_next, blue_next = (torch.where(ended.reshape(-1, 1, 1), self.team(final, uids),
                                               self.team(observations, uids))
                                   for uids in (self.red_uids, self.blue_uids))
            red_terminated, blue_terminated = (self.team(terminated, uids).bool()
                                               for uids in (self.red_uids, self.blue_uids))
            red_next_active = torch.where(ended.reshape(-1, 1), ~red_terminated & red_active,
                                          self.team(infos["active"], self.red_uids).bool())
            self.red.store(red_observations, red_actions, self.team(rewards, self.red_uids), red_active,
                           red_next, red_next_active)
            self.blue.store(blue_observations, blue_actions, self.team(rewards, self.blue_uids), blue_active,
                            blue_terminated, self.team(truncated, self.blue_uids).bool(), blue_next,
                            self.team(observations, self.blue_uids), self.team(infos["active"], self.blue_uids).bool())
            self.observations, self.infos, self.started = observations, infos, ended


def main() -> None:
    """Measure, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of the three workloads")
    parser.add_argument("--chunk", type=int, default=100, help="vectorized steps per timed chunk")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "straight_line_battle.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_seed(0)
    directory = tempfile.mkdtemp()
    env = example.make_env(seed=0)
    red, blue = example.make_mfq(env, directory), example.make_mfac(env, directory)
    for algorithm in (red, blue):
        algorithm.cfg["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
    trainer = SequentialTrainer(env=env, agents=[red, blue], cfg={"timesteps": 1, "disable_progressbar": True})
    straight = StraightLineBattle(example.make_env(seed=2), red, blue)
    random_env = example.make_env(seed=1)
    random_env.reset()
    actions_of = {uid: int(random_env.action_space(uid).n) for uid in random_env.possible_agents}

    def train(n: int) -> None:
        trainer.cfg["timesteps"] = n
        trainer.train()

    def step_env(n: int) -> None:
        for _ in range(n):
            random_env.step({uid: torch.randint(0, count, (random_env.num_envs, 1)) for uid, count in actions_of.items()})

    warm_up = red.cfg["learning_starts"] + 2 * blue.cfg["rollouts"]  # both algorithms' first updates
    train(warm_up)
    straight.step(warm_up)
    workloads: Dict[str, Callable[[int], None]] = {"library": train, "straight_line": straight.step, "env_only": step_env}
    # the same arithmetic: matrix-product work of one chunk of each after the warm-up
    flop = {name: count_flop(lambda run=workloads[name]: run(args.chunk)) for name in ("library", "straight_line")}
    seconds = dict(zip(workloads, interleaved_many(list(workloads.values()), args.chunk, args.rounds)))
    print(f"battle 12 against 12, {env.num_envs} copies, {args.rounds} rounds of {args.chunk} vectorized steps each:")
    report = {"example": "examples/magent2/battle_mfq_vs_mfac.py", "torch_threads": 1, "rounds": args.rounds,
              "chunk_vectorized_steps": args.chunk, "num_envs": env.num_envs,
              **compared(seconds, env.num_envs, "vectorized step", flop, "chunk")}
    pathlib.Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    for closing in (env, random_env, straight.env):
        closing.close()


if __name__ == "__main__":
    main()

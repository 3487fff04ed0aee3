"""How fast an example's MAPPO could train if it were written as straight-line PyTorch with no library around it.

    python benchmarks/straight_line_ppo.py --example examples/vmas/balance_mappo.py --chunk 4 --rounds 12 \\
        --output benchmarks/results/straight_line_ppo_vmas.json
    python benchmarks/straight_line_ppo.py --example examples/mpe/simple_spread_mappo.py --chunk 20 --rounds 8 \\
        --output benchmarks/results/straight_line_ppo_mpe.json
    python benchmarks/straight_line_ppo.py --learning-check 40 --output <file>   # the loop alone: does it learn?

``network_floor.py`` bounds training by the env and the networks alone; this script bounds it by the
algorithm: one flat loop, written for this one configuration, that does no more than the example's MAPPO
must do on every rollout in eager PyTorch. It takes copies of the example's own networks (the policy's MLP
and ``log_std``, or its logits, and the centralised critic's MLP) and the example's settings (rollout length,
epochs, minibatches, discount, GAE, clipping, entropy scale, learning rate, fused Adam, gradient-norm clip),
and per rollout:

- acts: scales the observations and the global state by running statistics, one policy pass over every
  copy's agents, a sample and its log-probability (written out, not
  through ``torch.distributions``); steps the same wrapper the example trains on;
- stores the scaled inputs (the statistics move only after the update, so the update reads the inputs the
  acting saw without scaling them again), the actions, log-probabilities, rewards and flags;
- bootstraps time limits with the critic's value of the final observation, where a copy was truncated;
- values the whole rollout in one critic pass, GAE over the rollout, advantages normalised;
- for each epoch and shuffled minibatch: one policy pass, one critic pass, the clipped surrogate, the
  clipped value loss and the entropy, one backward pass, the gradient norm clipped per network, one fused
  Adam step per network; the critic alone tops its steps up to ``value_min_steps``;
- moves the input statistics and a running scale of the returns (in place of the example's return
  scaler: a plain running scale, without PopArt's rescaling of the critic's last layer).

It leaves out what the library does for generality (agents that leave, action masks, groups, stacked models,
KL reports, logging, checks, episode statistics, the trainer's bookkeeping). It is a lean implementation to
measure, not one to train with: its rate, as a share of env-only stepping, estimates how far eager PyTorch on one
thread takes the example's algorithm with nothing around it (an estimate, not a proof: much of the update's time
is the cost per operation, which other code could shave), and the gap to the library's rate is what the
library's structure costs. PyTorch's flop counter checks the arithmetic: the matrix-product work of one
rollout of each training workload (counted before the timing) is the same but for the critic passes of time-limit
bootstraps, which depend on when each env's copies end. Three workloads are timed in alternating chunks of
``--chunk`` rollouts on one PyTorch thread: the example's trainer, this loop, and env-only stepping of a third env
with uniform random actions.
"""

import argparse
import copy
import json
import math
import pathlib
import sys
from typing import Any, Callable, Dict, List, Mapping, Tuple

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from network_floor import example_trainer  # noqa: E402
from throughput import count_flop, env_stepper, interleaved_many, load_example  # noqa: E402

from marlparts.utils.agent_tensors import stack_agents, unstack_agents  # noqa: E402

HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


class RunningScale:
    """Running mean and variance of the last dimension's features, merged rollout by rollout."""

    def __init__(self, size: int) -> None:
        self.mean, self.var, self.count = torch.zeros(size), torch.ones(size), 1e-4
        self.total = torch.zeros(size, dtype=torch.float64)
        self.total_sq, self.seen = torch.zeros(size, dtype=torch.float64), 0

    def std(self) -> torch.Tensor:
        """The current standard deviation of each feature."""
        return (self.var + 1e-8).sqrt()

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` standardised by the current statistics, clipped to [-5, 5]."""
        return ((x - self.mean) / self.std()).clamp(-5.0, 5.0)

    def unscale(self, x: torch.Tensor) -> torch.Tensor:
        """Standardised ``x`` back in the units of the features."""
        return x * self.std() + self.mean

    def take_in(self, x: torch.Tensor) -> None:
        """Add ``x``'s rows to the statistics of the current rollout."""
        rows = x.reshape(-1, x.shape[-1])
        self.total += rows.sum(0, dtype=torch.float64)
        self.total_sq += rows.square().sum(0, dtype=torch.float64)
        self.seen += rows.shape[0]

    def merge(self) -> None:
        """Merge the current rollout's statistics into the running ones (sums in float64, the variance at least 0:
        a constant feature's rounding cannot make it negative)."""
        mean = self.total / self.seen
        var = (self.total_sq / self.seen - mean.square()).clamp(min=0.0)
        mean, var = mean.float(), var.float()
        delta, total = mean - self.mean, self.count + self.seen
        self.var = (self.var * self.count + var * self.seen + delta.square() * self.count * self.seen / total) / total
        self.mean = self.mean + delta * self.seen / total
        self.count = total
        self.total.zero_(), self.total_sq.zero_()
        self.seen = 0


def gae(*, rewards: torch.Tensor, values: torch.Tensor, last_values: torch.Tensor, final_values: torch.Tensor,
        terminated: torch.Tensor, truncated: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """GAE advantages of ``values`` over a rollout ``(steps, copies, agents)``: time limits bootstrap from
    ``final_values``, ``last_values`` follow the rollout's last step."""
    advantages, running = torch.zeros_like(values), torch.zeros_like(last_values)
    for t in reversed(range(values.shape[0])):
        following = last_values if t == values.shape[0] - 1 else values[t + 1]
        following = torch.where(truncated[t], final_values[t], following)
        delta = rewards[t] + gamma * following * ~terminated[t] - values[t]
        running = delta + gamma * lam * ~(terminated[t] | truncated[t]) * running
        advantages[t] = running
    return advantages


def clipped_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, parameters: List[torch.nn.Parameter],
                 max_norm: float) -> None:
    """One optimizer step on ``loss`` with the gradient norm of ``parameters`` clipped to ``max_norm``."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    optimizer.step()


class StraightLinePPO:
    """MAPPO with one shared policy and one centralised critic (one value per agent), as one flat loop."""

    def __init__(self, env: Any, agent: Any) -> None:
        self.env = env
        self.uids = list(env.possible_agents)
        first = self.uids[0]
        cfg = agent.cfg
        self.rollouts, self.epochs, self.minibatches = int(cfg["rollouts"]), int(cfg["learning_epochs"]), \
            int(cfg["mini_batches"])
        self.critic_steps = int(cfg["value_min_steps"])
        self.gamma, self.lam, self.clip, self.value_clip = cfg["discount_factor"], cfg["gae_lambda"], \
            cfg["ratio_clip"], cfg["value_clip"]
        self.entropy_scale, self.max_norm = cfg["entropy_loss_scale"], cfg["grad_norm_clip"]
        policy_model = agent.models[first]["policy"]
        self.policy = copy.deepcopy(policy_model)
        self.critic = copy.deepcopy(agent.models[first]["value"])
        space = env.action_space(first)
        self.discrete = hasattr(space, "n")
        if not self.discrete:
            self.low = torch.as_tensor(space.low, dtype=torch.float32)
            self.high = torch.as_tensor(space.high, dtype=torch.float32)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg["learning_rate"], fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg["learning_rate"], fused=True)
        observations, _ = env.reset()
        self.observations = stack_agents(observations, self.uids)
        self.state = env.state()
        copies, agents, width = self.observations.shape
        self.observation_scale = RunningScale(width)
        self.state_scale = RunningScale(self.state.shape[-1])
        self.return_scale = RunningScale(1)
        shape = (self.rollouts, copies, agents)
        self.stored_observations = torch.zeros(shape + (width,))
        self.stored_states = torch.zeros(self.rollouts, copies, self.state.shape[-1])
        self.actions = torch.zeros(shape, dtype=torch.long) if self.discrete else torch.zeros(shape + space.shape)
        self.log_probs, self.rewards = torch.zeros(shape), torch.zeros(shape)
        self.terminated, self.truncated = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)
        self.final_values = torch.zeros(shape)

    def log_std(self) -> torch.Tensor:
        """The Gaussian policy's clamped log standard deviation."""
        return self.policy.log_std.clamp(self.policy.min_log_std, self.policy.max_log_std)

    def sample(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """An action of the policy for each row of scaled observations ``(rows, width)``, and its log-probability."""
        outputs = self.policy.net(inputs)
        if self.discrete:
            log_p = torch.log_softmax(outputs, dim=-1)
            actions = torch.multinomial(log_p.exp(), 1)
            return actions.squeeze(-1), log_p.gather(-1, actions).squeeze(-1)
        log_std = self.log_std()
        noise = torch.randn_like(outputs)
        return outputs + log_std.exp() * noise, (-0.5 * noise.square() - log_std - HALF_LOG_TWO_PI).sum(-1)

    def evaluate(self, inputs: torch.Tensor, actions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The log-probability of ``actions`` for each row of ``inputs``, and the policy's entropy there."""
        outputs = self.policy.net(inputs)
        if self.discrete:
            log_p = torch.log_softmax(outputs, dim=-1)
            return log_p.gather(-1, actions.unsqueeze(-1)).squeeze(-1), -(log_p.exp() * log_p).sum(-1)
        log_std = self.log_std()
        log_prob = (-0.5 * ((actions - outputs) * (-log_std).exp()).square() - log_std - HALF_LOG_TWO_PI).sum(-1)
        return log_prob, (0.5 + HALF_LOG_TWO_PI + log_std).sum().expand(log_prob.shape)

    def rollout(self) -> None:
        """One rollout of ``rollouts`` steps of every copy, then the update."""
        copies, agents, width = self.observations.shape
        with torch.no_grad():
            for t in range(self.rollouts):
                self.observation_scale.take_in(self.observations)
                self.state_scale.take_in(self.state)
                scaled = self.observation_scale.scale(self.observations)
                self.stored_observations[t] = scaled
                self.stored_states[t] = self.state_scale.scale(self.state)
                sample, log_prob = self.sample(scaled.reshape(-1, width))
                self.log_probs[t] = log_prob.reshape(copies, agents)
                self.actions[t] = sample.reshape(self.actions.shape[1:])
                taken = sample if self.discrete else torch.maximum(torch.minimum(sample, self.high), self.low)
                taken = taken.reshape(copies, agents, -1)
                observations, rewards, terminated, truncated, infos = self.env.step(unstack_agents(taken, self.uids))
                self.rewards[t] = stack_agents(rewards, self.uids).reshape(copies, agents)
                self.terminated[t] = stack_agents(terminated, self.uids).reshape(copies, agents)
                self.truncated[t] = stack_agents(truncated, self.uids).reshape(copies, agents)
                if bool(self.truncated[t].any()):  # bootstrap time limits from the final observation's state
                    final = infos["final_state"] if "final_state" in infos else \
                        stack_agents(infos["final_observation"], self.uids).reshape(copies, -1)
                    values = self.critic.net(self.state_scale.scale(final))
                    self.final_values[t] = torch.where(self.truncated[t], self.return_scale.unscale(values), 0.0)
                else:
                    self.final_values[t].zero_()
                self.observations = stack_agents(observations, self.uids)
                self.state = self.env.state()
            advantages, returns, old_values = self.advantages()
        self.update(advantages, returns, old_values)

    def advantages(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """GAE with time-limit bootstraps over the rollout: the standardised advantages, the returns, and the
        critic's outputs (its own units) at every stored step."""
        outputs = self.critic.net(self.stored_states.flatten(0, 1))
        values = self.return_scale.unscale(outputs).reshape(self.rewards.shape)
        last = self.return_scale.unscale(self.critic.net(self.state_scale.scale(self.state)))
        advantages = gae(rewards=self.rewards, values=values, last_values=last, final_values=self.final_values,
                         terminated=self.terminated, truncated=self.truncated, gamma=self.gamma, lam=self.lam)
        returns = advantages + values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages, returns, outputs

    def update(self, advantages: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor) -> None:
        """Epochs of shuffled minibatches of the clipped PPO losses; then the critic alone; then the statistics.
        ``old_values``: the critic's outputs at the stored steps, ``(rollouts * copies, agents)``, in its own units.
        """
        targets = ((returns - self.return_scale.mean) / self.return_scale.std()).flatten(0, 1)
        data = (self.stored_observations.flatten(0, 1), self.stored_states.flatten(0, 1), self.actions.flatten(0, 1),
                self.log_probs.flatten(0, 1), advantages.flatten(0, 1), targets, old_values)
        rows, steps = data[0].shape[0], 0
        for _ in range(self.epochs):
            for indexes in torch.randperm(rows).chunk(self.minibatches):
                observations, states, actions, old_log_probs, batch_advantages, batch_targets, batch_old = \
                    (tensor[indexes] for tensor in data)
                log_probs, entropy = self.evaluate(observations.flatten(0, 1), actions.flatten(0, 1))
                log_probs = log_probs.reshape(old_log_probs.shape)
                ratio = (log_probs - old_log_probs).exp()
                surrogate = torch.min(ratio * batch_advantages,
                                      ratio.clamp(1 - self.clip, 1 + self.clip) * batch_advantages).mean()
                value_loss = self.value_loss(self.critic.net(states), batch_targets, batch_old)
                loss = -surrogate + value_loss - self.entropy_scale * entropy.mean()
                self.policy_optimizer.zero_grad(set_to_none=True)
                self.critic_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_norm)
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_norm)
                self.policy_optimizer.step()
                self.critic_optimizer.step()
                steps += 1
        while steps < self.critic_steps:
            for indexes in torch.randperm(rows).chunk(self.minibatches)[:self.critic_steps - steps]:
                loss = self.value_loss(self.critic.net(data[1][indexes]), targets[indexes], old_values[indexes])
                clipped_step(loss, self.critic_optimizer, list(self.critic.parameters()), self.max_norm)
                steps += 1
        self.observation_scale.merge()
        self.state_scale.merge()
        self.return_scale.take_in(returns.reshape(-1, 1))
        self.return_scale.merge()

    def value_loss(self, predicted: torch.Tensor, targets: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        """The larger of the squared error and that of the prediction clipped around the old value, averaged."""
        clipped = old + (predicted - old).clamp(-self.value_clip, self.value_clip)
        return torch.max((predicted - targets).square(), (clipped - targets).square()).mean()


def compared(seconds: Mapping[str, float], env_steps: int, unit: str, flop: Mapping[str, float], flop_of: str
             ) -> Dict[str, Any]:
    """The figures of the three workloads (``seconds`` per ``unit`` of ``env_steps`` env steps, for ``"library"``,
    ``"straight_line"`` and ``"env_only"``; ``flop``: the matrix-product work of one ``flop_of`` of the first two),
    printed and returned for the report.
    """
    figures = {
        "env_steps_per_" + unit.replace(" ", "_"): env_steps,
        "steps_per_s": {name: env_steps / value for name, value in seconds.items()},
        "ms_per_" + unit.replace(" ", "_"): {name: 1000 * value for name, value in seconds.items()},
        "library_over_env_only": seconds["env_only"] / seconds["library"],
        "straight_line_over_env_only": seconds["env_only"] / seconds["straight_line"],
        "library_over_straight_line": seconds["straight_line"] / seconds["library"],
        "matmul_flop_per_" + flop_of: dict(flop),
    }
    for name, value in seconds.items():
        print(f"  {name:14s} {env_steps / value:8.0f} env steps/s ({1000 * value:.2f} ms a {unit})")
    print(f"  library / env-only:        {figures['library_over_env_only']:.1%}")
    print(f"  straight line / env-only:  {figures['straight_line_over_env_only']:.1%}")
    print(f"  library / straight line:   {figures['library_over_straight_line']:.1%}")
    print(f"  matrix-product GFLOP of one {flop_of}: library {flop['library'] / 1e9:.3f}, "
          f"straight line {flop['straight_line'] / 1e9:.3f}")
    return figures


def learning_check(straight: StraightLinePPO, rollouts: int, output: str) -> None:
    """Train ``straight`` for ``rollouts`` rollouts and write each rollout's mean reward per agent, summed over the
    rollout's steps: a check that the loop learns (so that it does the work a PPO does), not a learning figure.
    """
    rewards = []
    for index in range(rollouts):
        straight.rollout()
        rewards.append(float(straight.rewards.mean()) * straight.rollouts)
        if index % max(1, rollouts // 10) == 0 or index == rollouts - 1:
            print(f"rollout {index + 1}: mean reward per agent over the rollout {rewards[-1]:.2f}", flush=True)
    pathlib.Path(output).write_text(json.dumps({"rollouts": rollouts, "env_steps_per_rollout": straight.rollouts
                                                * straight.env.num_envs, "reward_per_agent_per_rollout": rewards},
                                               indent=1) + "\n")


def main() -> None:
    """Measure, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="examples/vmas/balance_mappo.py")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of the three workloads")
    parser.add_argument("--chunk", type=int, default=1, help="rollouts per timed chunk")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "straight_line_ppo.json"))
    parser.add_argument("--learning-check", type=int, default=0, metavar="ROLLOUTS",
                        help="only train the straight line for this many rollouts and print its rewards (no timing)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    example = load_example(args.example)
    env, agent, trainer, rollout = example_trainer(example)
    straight = StraightLinePPO(example.make_env(seed=2), agent)
    if args.learning_check:
        learning_check(straight, args.learning_check, args.output)
        return
    env_only = example.make_env(seed=1)
    step_env_only = env_stepper(env_only)  # uniform random actions

    def train(n: int) -> None:
        trainer.cfg["timesteps"] = n * rollout
        trainer.train()

    def train_straight(n: int) -> None:
        for _ in range(n):
            straight.rollout()

    def step_env(n: int) -> None:
        step_env_only(n * rollout)

    workloads: Dict[str, Callable[[int], None]] = {"library": train, "straight_line": train_straight,
                                                   "env_only": step_env}
    # the same arithmetic: matrix-product work of one rollout of each (also a warm-up)
    flop = {name: count_flop(lambda run=workloads[name]: run(1)) for name in ("library", "straight_line")}
    seconds = dict(zip(workloads, interleaved_many(list(workloads.values()), args.chunk, args.rounds)))
    print(f"{args.example}, {args.rounds} rounds of {args.chunk} rollout(s) each:")
    report = {"example": args.example, "torch_threads": 1, "rounds": args.rounds, "chunk_rollouts": args.chunk,
              **compared(seconds, rollout * env.num_envs, "rollout", flop, "rollout")}
    pathlib.Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    for closing in (env, env_only, straight.env):
        closing.close()


if __name__ == "__main__":
    main()

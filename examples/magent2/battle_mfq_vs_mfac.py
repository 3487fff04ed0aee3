"""MFQ against MFAC on MAgent2 battle (12 against 12): two mean-field algorithms trained by fighting each other.

The red team is trained by MFQ (mean-field Q-learning), the blue team by MFAC (mean-field actor-critic);
each team shares one network among its agents, whose inputs are the agent's 13x13 view and the mean action
of its living teammates. Both learn in the same battles. At the end each team fights 200 battles against a
team of uniform random agents, and the two fight each other; a team wins a battle when more of its agents
are alive at the end (or the other team is wiped out). MAgent2's own ``state()`` is not needed: neither
algorithm reads a global state. Run ``python examples/magent2/battle_mfq_vs_mfac.py --help`` for the options.
"""

import argparse
import json
import os
import time
from typing import Any, Dict

import gymnasium
import torch
from magent2.environments import battle_v4
from pettingzoo.utils import BaseParallelWrapper

from marlparts.agents import MFAC, MFAC_DEFAULT_CONFIG, MFQ, MFQ_DEFAULT_CONFIG, MultiAgent
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space

MAP_SIZE = 20  # 12 agents a side
MAX_CYCLES = 200  # steps of a battle
NUM_ENVS = 8  # battles stepped together
TIMESTEPS = 300_000  # env steps of training (all copies counted)
DIRECTORY = "runs/battle_mfq_vs_mfac"


class Net(DeterministicMixin, Model):
    """An MLP with a plain output: MFQ's utilities and MFAC's critic, each of every action."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64), activation=torch.nn.ReLU)

    def compute(self, inputs, role=""):
        """The output for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Policy(CategoricalMixin, Model):
    """MFAC's actor: an MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), activation=torch.nn.ReLU,
                       output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class AliveCounts(BaseParallelWrapper):
    """battle with each team's number of living agents after the step in every agent's infos (``red_alive``,
    ``blue_alive``): when a team is wiped out MAgent2 ends the game by terminating every agent, so the
    flags alone do not tell who survived.
    """

    def step(self, actions):
        """Step the battle and add the counts to the infos."""
        observations, rewards, terminated, truncated, infos = super().step(actions)
        battle = self.unwrapped
        counts = {f"{name}_alive": float(battle.env.get_num(handle)) for name, handle in zip(("red", "blue"),
                                                                                            battle.handles)}
        return observations, rewards, terminated, truncated, {uid: {**info, **counts} for uid, info in infos.items()}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0, map_size: int = MAP_SIZE) -> MultiAgentEnv:
    """battle_v4 as ``num_envs`` copies; agents that die leave the episode (they become inactive), and
    ``infos["env_info"]`` carries each team's number of living agents.
    """
    return wrap_env(lambda: AliveCounts(battle_v4.parallel_env(map_size=map_size, max_cycles=MAX_CYCLES)),
                    num_envs=num_envs, seed=seed, info_keys=["red_alive", "blue_alive"],
                    state_source="observations")  # MAgent2's state() raises once a team is wiped out


def team(env: MultiAgentEnv, prefix: str) -> list:
    """The agent ids of one side."""
    return [uid for uid in env.possible_agents if uid.startswith(prefix)]


def make_mfq(env: MultiAgentEnv, directory: str = DIRECTORY) -> MFQ:
    """MFQ for the red team: one utility network shared by its agents."""
    uids = team(env, "red")
    actions = int(env.action_space(uids[0]).n)
    q = Net(observation_space=joint_space([env.observation_space(uids[0]), gymnasium.spaces.Box(0, 1, (actions,))]),
            output_size=actions)
    cfg = MFQ_DEFAULT_CONFIG.copy()
    cfg.update(batch_size=64, update_interval=4, learning_starts=200, learning_rate=5e-4, discount_factor=0.95,
               polyak=0.01, temperature=0.1)
    cfg["exploration"].update(initial_epsilon=1.0, final_epsilon=0.05, timesteps=20_000)
    cfg["experiment"].update(directory=directory, experiment_name="red_mfq")
    memories = {uid: RandomMemory(memory_size=1000, num_envs=env.num_envs) for uid in uids}
    memory = memories[uids[0]]  # the team is one group: one memory holds every agent's rows
    return MFQ(possible_agents=uids, models={uid: {"q": q} for uid in uids}, memories={uid: memory for uid in uids},
               observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, device=env.device, cfg=cfg)


def make_mfac(env: MultiAgentEnv, directory: str = DIRECTORY) -> MFAC:
    """MFAC for the blue team: one policy and one critic shared by its agents."""
    uids = team(env, "blue")
    actions = int(env.action_space(uids[0]).n)
    policy = Policy(observation_space=env.observation_space(uids[0]), action_space=env.action_space(uids[0]))
    critic = Net(observation_space=joint_space([env.observation_space(uids[0]),
                                                gymnasium.spaces.Box(0, 1, (actions,))]), output_size=actions)
    cfg = MFAC_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=50, learning_epochs=2, mini_batches=2, learning_rate=5e-4, discount_factor=0.95,
               gae_lambda=0.8, entropy_loss_scale=0.08)  # a smaller bonus lets the attack penalty stop all attacks
    cfg["experiment"].update(directory=directory, experiment_name="blue_mfac")
    memory = RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs)
    return MFAC(possible_agents=uids, models={uid: {"policy": policy, "value": critic} for uid in uids},
                memories={uid: memory for uid in uids}, observation_spaces=env.observation_spaces,
                action_spaces=env.action_spaces, device=env.device, cfg=cfg)


def battles(env: MultiAgentEnv, red: Any, blue: Any, count: int) -> Dict[str, float]:
    """``count`` battles between ``red`` and ``blue`` (each an algorithm, acting greedily, or ``"random"``), the
    first ones of each copy after a reset: each team's win rate, the draw rate, and the mean number of each
    team's agents alive at the end.
    """
    sides = {"red": (red, team(env, "red")), "blue": (blue, team(env, "blue"))}
    for player, _ in sides.values():
        if isinstance(player, MultiAgent):
            player.set_mode("eval")
    observations, infos = env.reset()
    outcomes = {"red wins": 0, "blue wins": 0, "draws": 0}
    alive_at_end = {"red": 0.0, "blue": 0.0}
    # each copy plays a fixed share of the battles, so quick ones (wipe-outs) are not favoured
    share = [count // env.num_envs + (1 if copy < count % env.num_envs else 0) for copy in range(env.num_envs)]
    finished = 0
    with torch.no_grad():
        while finished < count:
            actions: Dict[str, torch.Tensor] = {}
            for player, uids in sides.values():
                if isinstance(player, MultiAgent):
                    actions.update(player.act(observations, None, infos, 0, 0))
                else:  # uniform random actions for the whole side at once
                    drawn = torch.randint(0, int(env.action_space(uids[0]).n), (env.num_envs, len(uids)))
                    actions.update({uid: drawn[:, k:k + 1] for k, uid in enumerate(uids)})
            observations, _, _, _, infos = env.step(actions)
            ended = infos.get("episode_end")
            if ended is None or not ended.any():
                continue
            counts = {side: infos["env_info"][f"{side}_alive"].max(dim=1).values for side in sides}  # (num_envs,)
            for copy in ended.reshape(-1).nonzero().flatten().tolist():
                if share[copy] == 0:
                    continue
                share[copy] -= 1
                red_alive, blue_alive = float(counts["red"][copy]), float(counts["blue"][copy])
                outcomes["red wins" if red_alive > blue_alive else "blue wins" if red_alive < blue_alive else "draws"] += 1
                alive_at_end["red"] += red_alive
                alive_at_end["blue"] += blue_alive
                finished += 1
    for player, _ in sides.values():
        if isinstance(player, MultiAgent):
            player.set_mode("train")
    return {**{key: value / count for key, value in outcomes.items()},
            **{f"{side} alive": value / count for side, value in alive_at_end.items()}}


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="battles stepped together")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs, checkpoints and results go")
    parser.add_argument("--checkpoint", nargs=2, metavar=("MFQ", "MFAC"), help="load these checkpoints first")
    parser.add_argument("--eval", action="store_true", help="only evaluate the teams of --checkpoint, no training")
    parser.add_argument("--battles", type=int, default=200, help="evaluation battles of each pairing")
    return parser.parse_args()


def main() -> None:
    """Train both teams against each other, save them, and print each pairing's battle results."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates saved teams: give their files with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.seed)
    red, blue = make_mfq(env, args.directory), make_mfac(env, args.directory)
    if args.checkpoint:
        red.load(args.checkpoint[0])
        blue.load(args.checkpoint[1])
    trainer = SequentialTrainer(env=env, agents=[red, blue], cfg={"timesteps": args.timesteps // env.num_envs})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        steps = trainer.cfg["timesteps"] * env.num_envs
        for name, algorithm in (("MFQ", red), ("MFAC", blue)):
            checkpoint = os.path.join(algorithm.experiment_dir, "checkpoints", "final_agent.pt")
            algorithm.save(checkpoint)
            print(f"{name} checkpoint: {checkpoint}")
        print(f"trained {steps} env steps in {seconds:.2f} s: {steps / seconds:.0f} env steps per second")
    evaluation = make_env(args.num_envs, seed=args.seed + 10_000)  # battles the training never saw
    results = {"MFQ (red) against random": battles(evaluation, red, "random", args.battles),
               "MFAC (blue) against random": battles(evaluation, "random", blue, args.battles),
               "MFQ (red) against MFAC (blue)": battles(evaluation, red, blue, args.battles)}
    for pairing, result in results.items():
        print(f"{pairing}: red wins {result['red wins']:.3f}, blue wins {result['blue wins']:.3f}, draws "
              f"{result['draws']:.3f} over {args.battles} battles (alive at the end: red {result['red alive']:.2f}, "
              f"blue {result['blue alive']:.2f})")
    os.makedirs(args.directory, exist_ok=True)
    with open(os.path.join(args.directory, "battles.json"), "w") as file:
        json.dump(results, file, indent=2)
    env.close()
    evaluation.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()

"""Turn-based PettingZoo (AEC) envs: turns, masks, rewards that reach a waiting agent, opponents, outcomes."""

import os

import numpy as np
import pytest
import torch
from pettingzoo.classic import tictactoe_v3

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import RandomPolicy
from marlparts.utils import set_seed
from tests.helpers import build_mappo, parameters_vector
from tests.test_maddpg import build as build_maddpg
from tests.toy_envs import CallAndAnswerEnv, EliminationEnv


def legal_random_actions(env, infos, generator):
    return {uid: torch.multinomial(infos["action_mask"][uid].float(), 1, generator=generator)
            for uid in env.possible_agents}


@pytest.mark.parametrize("workers", [0, 1])
def test_tictactoe_is_stepped_one_move_at_a_time_and_the_losers_reward_arrives_on_the_winners_move(workers):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=3, workers=workers, seed=0)
    assert env.turn_based and env.possible_agents == ["player_1", "player_2"]
    observations, infos = env.reset()
    generator = torch.Generator().manual_seed(0)
    games = 0
    for _ in range(60):
        active = torch.cat([infos["active"][uid] for uid in env.possible_agents], dim=1)
        assert (active.sum(dim=1) == 1).all()  # exactly one player moves in every game
        board = observations["player_1"].reshape(-1, 3, 3, 2).sum(dim=-1).reshape(-1, 9)
        mover_mask = torch.where(infos["active"]["player_1"], infos["action_mask"]["player_1"],
                                 infos["action_mask"]["player_2"])
        assert torch.equal(mover_mask, board == 0)  # the mover's mask is the empty squares
        actions = legal_random_actions(env, infos, generator)
        observations, rewards, terminated, truncated, infos = env.step(actions)
        ended = infos["episode_end"].squeeze(1)
        r1, r2 = rewards["player_1"].squeeze(1), rewards["player_2"].squeeze(1)
        assert torch.equal(r1, -r2) and torch.all(r1[~ended] == 0)  # zero-sum, paid only at the end
        assert torch.equal(terminated["player_1"].squeeze(1), ended)
        assert torch.equal(terminated["player_2"].squeeze(1), ended)
        won = ended & (r1 != 0)
        if won.any():
            winner_was_mover = torch.where(r1[won] > 0, active[won, 0], active[won, 1])
            assert winner_was_mover.all()  # the waiting player's -1 came on the winner's move
        games += int(ended.sum())
        assert torch.equal(infos["active"]["player_1"].squeeze(1)[ended], torch.ones(int(ended.sum()), dtype=torch.bool))
    assert games >= 5
    env.close()


def test_an_unsupported_env_is_refused_with_the_supported_kinds_named():
    with pytest.raises(TypeError, match="PettingZoo ParallelEnv or AECEnv.*VMAS.*Isaac Lab"):
        wrap_env(lambda: object())


def test_an_env_whose_spaces_change_at_a_reset_is_refused():
    env = wrap_env(lambda: CallAndAnswerEnv(grow_at_reset=True), num_envs=1)
    env.reset()
    with pytest.raises(ValueError, match=r"env copy 0 changed the observation space of agent 'caller'"):
        env.step({"caller": torch.ones(1, 1, dtype=torch.long), "answerer": torch.ones(1, 1, dtype=torch.long)})
        env.step({"caller": torch.ones(1, 1, dtype=torch.long), "answerer": torch.ones(1, 1, dtype=torch.long)})


def test_a_mask_with_no_legal_action_for_the_agent_to_move_is_refused():
    env = wrap_env(lambda: CallAndAnswerEnv(forbid_all=True), num_envs=1)
    env.reset()
    with pytest.raises(ValueError, match=r"action mask of agent 'answerer' in env copy 0 allows no action"):
        env.step({"caller": torch.ones(1, 1, dtype=torch.long), "answerer": torch.zeros(1, 1, dtype=torch.long)})


def test_after_a_player_is_eliminated_the_next_player_sees_its_own_turn_and_the_eliminated_its_final_view():
    env = wrap_env(lambda: EliminationEnv(), num_envs=1)
    env.reset()
    actions = {uid: torch.zeros(1, 1, dtype=torch.long) for uid in env.possible_agents}
    observations, rewards, terminated, _, infos = env.step(actions)  # "first" moves; "out" is eliminated by it
    assert bool(terminated["out"]) and float(rewards["out"]) == -1.0
    assert bool(infos["active"]["second"]) and not bool(infos["active"]["first"])
    # "second" is to move: its observation and mask are those of its own turn, not of the dead step before it
    assert observations["second"].tolist() == [[1.0, 1.0]]
    assert infos["action_mask"]["second"].tolist() == [[True, True]]
    assert observations["first"].tolist() == [[1.0, 0.0]]
    # the eliminated player's last view is the one PettingZoo's loop hands it at its dead step (its "turn")
    assert infos["final_observation"]["out"].tolist() == [[1.0, 1.0]]
    observations, _, _, _, infos = env.step({**actions, "second": torch.ones(1, 1, dtype=torch.long)})
    assert bool(infos["active"]["first"]) and observations["first"].tolist() == [[2.0, 1.0]]


def test_players_eliminated_together_each_keep_the_view_of_their_own_dead_step():
    env = wrap_env(lambda: EliminationEnv(eliminated=("out", "also_out")), num_envs=1)
    env.reset()
    _, rewards, terminated, _, infos = env.step({uid: torch.zeros(1, 1, dtype=torch.long) for uid in env.possible_agents})
    for uid in ("out", "also_out"):  # as PettingZoo's own loop hands each its last view: at its turn to leave
        assert bool(terminated[uid]) and float(rewards[uid]) == -1.0
        assert infos["final_observation"][uid].tolist() == [[1.0, 1.0]]
        assert infos["final_action_mask"][uid].tolist() == [[True, True]]
    assert bool(infos["active"]["second"]) and infos["action_mask"]["second"].tolist() == [[True, True]]


def test_the_action_of_an_agent_that_waits_is_ignored():
    env = wrap_env(lambda: CallAndAnswerEnv(), num_envs=1)
    env.reset()
    # the answerer is not to move: its action is not played (not even checked against its mask)
    _, rewards, _, _, infos = env.step({"caller": torch.ones(1, 1, dtype=torch.long),
                                        "answerer": torch.zeros(1, 1, dtype=torch.long)})
    assert bool(infos["active"]["answerer"]) and not bool(infos["active"]["caller"])
    _, rewards, _, _, infos = env.step({"caller": torch.zeros(1, 1, dtype=torch.long),
                                        "answerer": torch.ones(1, 1, dtype=torch.long)})
    assert float(rewards["caller"]) == 1.0 and float(rewards["answerer"]) == 1.0  # the call was 1, answered 1


@pytest.mark.learning
@pytest.mark.parametrize("algorithm, seed", [("ippo", 1), ("ippo", 2), ("mappo", 3)])
def test_the_caller_learns_from_a_reward_that_reaches_it_while_it_waits(algorithm, seed, tmp_path):
    torch.manual_seed(seed)
    env = wrap_env(lambda: CallAndAnswerEnv(), num_envs=8, seed=seed)
    agent = build_mappo(env, share=False, rollouts=8, directory=str(tmp_path), algorithm=algorithm,
                        cfg={"learning_rate": 3e-3, "discount_factor": 0.99, "gae_lambda": 0.0})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 250, "disable_progressbar": True})
    trainer.train()
    report = trainer.eval(episodes=20)
    # greedy play: call 1 (+1, paid on the answerer's move) and repeat it (+1). With gae_lambda 0 the caller's
    # advantage is its move's own transition: credited only with the reward of its own step (always 0) and the
    # value of the step after it (a waiting row, which no value loss trains), it would stay at its first coin flip
    assert report["returns"]["caller"] == 1.0
    assert report["returns"]["answerer"] == 1.0
    assert report["outcomes"]["caller"] == {"win": 1.0, "draw": 0.0, "loss": 0.0}


def test_random_policy_plays_only_legal_moves_and_repeats_itself_from_a_seed():
    space = tictactoe_v3.env().action_space("player_1")
    mask = torch.zeros(500, 9, dtype=torch.bool)
    mask[:, [2, 5]] = True
    policy = RandomPolicy(space, seed=3)
    first = policy(torch.zeros(500, 18), mask)
    assert set(first.flatten().tolist()) == {2, 5}
    policy.reset(3)
    assert torch.equal(policy(torch.zeros(500, 18), mask), first)


def test_evaluation_against_a_random_seat_reports_each_seats_outcomes(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo")
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True})
    first = trainer.eval(40, opponents={"player_2": "random"})
    again = trainer.eval(40, opponents={"player_2": "random"})
    assert first["outcomes"] == again["outcomes"]  # the same seed: the same games, the random player included
    assert first["opponents"] == ["player_2"]
    assert list(first["teams"]["IPPO"]["returns"]) == ["player_1"]  # the team is the seat it played
    rates = first["outcomes"]["player_1"]
    assert sum(rates.values()) == pytest.approx(1.0)
    other = first["outcomes"]["player_2"]
    assert (rates["win"], rates["loss"]) == (other["loss"], other["win"])  # zero-sum
    both_random = trainer.eval(400, opponents={"player_1": "random", "player_2": "random"})
    assert both_random["teams"] == {} and 0.45 < both_random["outcomes"]["player_1"]["win"] < 0.75
    env.close()


def test_a_frozen_copy_keeps_playing_as_the_agent_did_when_it_was_taken(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo", cfg={"learning_rate": 1e-2})
    frozen = agent.frozen_copy()
    policy = agent.models["player_1"]["policy"]
    snapshot = parameters_vector(policy)
    trainer = SequentialTrainer(env=env, agents=agent, opponents=None,
                                cfg={"timesteps": 16, "disable_progressbar": True})
    trainer.train()
    assert not torch.equal(parameters_vector(policy), snapshot)
    assert torch.equal(parameters_vector(frozen.models["player_1"]["policy"]), snapshot)
    assert frozen.memories["player_1"] is None and frozen.tracker is None and not frozen.training
    report = trainer.eval(20, opponents={"player_2": frozen})
    assert report["opponents"] == ["player_2"]
    env.close()


def test_training_against_a_fixed_opponent_trains_only_the_algorithms_seat(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo", uids=["player_1"])
    with pytest.raises(ValueError, match=r"no algorithm controls agent\(s\) \['player_2'\]"):
        SequentialTrainer(env=env, agents=agent)
    with pytest.raises(ValueError, match=r"\['player_1'\] are given to opponents and controlled by an algorithm"):
        SequentialTrainer(env=env, agents=agent, opponents={"player_1": "random", "player_2": "random"})
    with pytest.raises(KeyError, match="'player_3', which is not an agent"):
        SequentialTrainer(env=env, agents=agent, opponents={"player_3": "random"})
    trainer = SequentialTrainer(env=env, agents=agent, opponents={"player_2": "random"},
                                cfg={"timesteps": 12, "disable_progressbar": True})
    trainer.train()
    report = trainer.eval(20)
    assert report["opponents"] == ["player_2"] and set(report["outcomes"]) == {"player_1", "player_2"}
    env.close()


def test_every_sampled_move_is_legal_during_self_play(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=8, seed=1)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo", rollouts=16)
    # tic-tac-toe raises on a move to a taken square: a sampled illegal move would end the run
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 64, "disable_progressbar": True}).train()
    stored = agent.groups[0].memory
    actions = stored.get_tensor_by_name("actions").squeeze(-1)
    masks = stored.get_tensor_by_name("action_mask")
    active = stored.get_tensor_by_name("active").squeeze(-1)
    chosen_legal = masks.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    # one player of two moves at each step; a move whose result falls in the next rollout is left out
    assert chosen_legal[active].all() and 0.4 < active.float().mean().item() <= 0.5
    assert np.isfinite(parameters_vector(agent.models["player_1"]["policy"]).numpy()).all()


def test_self_play_of_a_zero_sum_game_keeps_no_best_agent_since_its_team_return_is_zero_by_construction(tmp_path):
    set_seed(0)
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo", rollouts=8)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 16, "eval_interval": 8, "eval_episodes": 8,
                                                            "disable_progressbar": True})
    with pytest.warns(UserWarning, match=r"plays every seat of a game whose returns sum to zero.*no best_agent\.pt"):
        trainer.train()
    assert agent.zero_sum_self_play
    report = trainer.eval(8)  # greedy and sampled games: one pass at least has a winner
    team = trainer.teams[0]
    assert report["teams"][team].get("zero_sum_self_play") or report["sampled"]["teams"][team]["zero_sum_self_play"]
    assert report["mean_return"] == 0.0
    assert os.path.isdir(agent.experiment_dir)
    assert not os.path.exists(os.path.join(agent.experiment_dir, "checkpoints", "best_agent.pt"))
    assert agent.best_return == -float("inf")
    env.close()


def test_a_zero_sum_game_shown_by_any_pass_of_an_evaluation_keeps_later_all_draw_evaluations_from_best_agent(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo")
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1, "disable_progressbar": True})
    trainer.train()
    team = trainer.teams[0]
    draws = {"mean_return": 0.0, "std_return": 0.0, "returns": {"player_1": 0.0, "player_2": 0.0}, "mean_length": 9.0}
    won = {**draws, "returns": {"player_1": 1.0, "player_2": -1.0}, "zero_sum_self_play": True}
    reports = iter([{"teams": {team: draws}, "actions": "both", "sampled": {"teams": {team: won}}},  # greedy: draws
                    {"teams": {team: draws}, "actions": "greedy"}])  # a later evaluation of draws only
    trainer.eval = lambda *args, **kwargs: next(reports)
    with pytest.warns(UserWarning, match="sum to zero"):
        trainer._evaluate_during_training()
    trainer._evaluate_during_training()
    assert agent.best_return == -float("inf")
    assert not os.path.exists(os.path.join(agent.experiment_dir, "checkpoints", "best_agent.pt"))
    resumed = build_mappo(env, directory=str(tmp_path / "resumed"), algorithm="ippo")
    resumed.load_counters(agent.counters())  # a resumed run knows it too
    assert resumed.zero_sum_self_play
    # against a fixed player (one seat of the team's): a team return that is not 0 is a measure again
    trainer.eval = lambda *args, **kwargs: {"teams": {team: {**draws, "mean_return": 0.5}}, "actions": "greedy"}
    trainer._evaluate_during_training()
    assert not agent.zero_sum_self_play and agent.best_return == 0.5
    assert os.path.exists(os.path.join(agent.experiment_dir, "checkpoints", "best_agent.pt"))
    env.close()


def test_an_algorithm_that_cannot_credit_waiting_rewards_is_refused_on_a_turn_based_env():
    env = wrap_env(lambda: CallAndAnswerEnv(), num_envs=2)
    agent = build_maddpg(env)
    with pytest.raises(ValueError, match="MADDPG cannot train on a turn-based env"):
        SequentialTrainer(env=env, agents=agent)


def test_a_function_can_play_a_seat_and_is_handed_the_seats_observation_and_mask(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo")
    seen = []

    def first_free_square(observation, action_mask):
        seen.append((observation.shape, action_mask.shape))
        return action_mask.float().argmax(dim=1, keepdim=True)  # the lowest-numbered legal square

    trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})
    report = trainer.eval(16, opponents={"player_1": first_free_square})
    assert set(seen) == {((4, 18), (4, 9))}
    assert report["opponents"] == ["player_1"] and sum(report["outcomes"]["player_1"].values()) == pytest.approx(1.0)
    with pytest.raises(TypeError, match=r"opponents\['player_1'\] is a int"):
        trainer.eval(4, opponents={"player_1": 3})
    with pytest.raises(ValueError, match="the only named policy is 'random'"):
        trainer.eval(4, opponents={"player_1": "greedy"})
    env.close()


def opponent_moves(seed, evaluate_between):
    """The moves a training random opponent makes in 24 steps, with or without evaluations in between."""
    from marlparts.trainers import Callback

    class Moves(Callback):
        def __init__(self):
            self.moves = []

        def on_step(self, trainer, timestep):
            self.moves.append(trainer._training_state[2]["action_mask"]["player_2"].sum().item())

    torch.manual_seed(0)
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=2, seed=seed)
    agent = build_mappo(env, algorithm="ippo", uids=["player_1"], rollouts=64, directory="runs/test_opponents")
    moves = Moves()
    trainer = SequentialTrainer(env=env, agents=agent, opponents={"player_2": "random"}, callbacks=[moves],
                                cfg={"timesteps": 8, "disable_progressbar": True})
    for _ in range(3):
        torch.manual_seed(0)
        trainer.train()
        if evaluate_between:
            trainer.eval(4)
    env.close()
    return moves.moves


def test_a_training_random_opponent_is_seeded_by_the_run_and_left_alone_by_evaluations():
    assert opponent_moves(0, evaluate_between=False) == opponent_moves(0, evaluate_between=False)
    assert opponent_moves(0, evaluate_between=True) == opponent_moves(0, evaluate_between=False)


def test_an_algorithm_playing_a_seat_in_an_evaluation_is_left_as_it_was(tmp_path):
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), algorithm="ippo", uids=["player_1"])
    other = build_mappo(env, directory=str(tmp_path), algorithm="ippo", uids=["player_2"])
    trainer = SequentialTrainer(env=env, agents=[agent, other], cfg={"disable_progressbar": True})
    player = build_mappo(env, directory=str(tmp_path), algorithm="ippo")
    assert player.training
    trainer.eval(4, opponents={"player_2": player})
    assert player.training  # it played as a frozen copy of itself
    env.close()


def test_recurrent_models_train_on_a_turn_based_env_each_player_s_state_held_while_the_other_moves(tmp_path):
    from test_recurrent import _unclipped_value_loss
    from test_recurrent import build as build_recurrent

    set_seed(0)
    env = wrap_env(lambda: tictactoe_v3.env(), num_envs=2, seed=0)
    agent = build_recurrent(env, algorithm="ippo", rollouts=8, cfg={"learning_epochs": 1, "mini_batches": 1})
    losses = []
    original = agent.group_losses
    agent.group_losses = lambda group, chunks: losses.append(original(group, chunks)) or losses[-1]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    waiting, starts = memory.get_tensor_by_name("waiting"), memory.get_tensor_by_name("starts")
    assert torch.equal(waiting.sum(-1), torch.ones(8, 2, dtype=torch.long))  # one player waits at every move
    for name in ("policy_hidden", "value_hidden"):  # (steps, copies, players, hidden): each player's own state
        hidden = memory.get_tensor_by_name(name)
        held = waiting[:-1] & ~starts[1:]  # a player that waited at a step, in a game that goes on
        assert held.any() and torch.equal(hidden[1:][held], hidden[:-1][held]), name
        assert (hidden[1:][~starts[1:]] != 0).any(), name
    assert abs(losses[0]["kl"].item()) < 1e-6, "the replayed chunks give the stored log-probabilities"
    assert losses[0]["value"].item() == pytest.approx(_unclipped_value_loss(agent), rel=1e-4)
    env.close()


def test_an_aec_env_whose_agents_act_together_is_stepped_as_a_parallel_env():
    from mpe2 import simple_spread_v3

    env = wrap_env(lambda: simple_spread_v3.env(N=2, max_cycles=5), num_envs=2, seed=0)
    assert not env.turn_based
    _, infos = env.reset()
    assert all(bool(infos["active"][uid].all()) for uid in env.possible_agents)  # everyone acts at every step
    env.close()

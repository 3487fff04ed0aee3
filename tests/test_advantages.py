import pytest
import torch

from marlparts.agents.ppo.advantages import compute_gae


def hand_gae(rewards, values, terminated, truncated, final_values, last_value, gamma, lam):
    """Reference GAE for one env copy, written with plain Python floats."""
    T = len(rewards)
    advantages = [0.0] * T
    running = 0.0
    for t in reversed(range(T)):
        if terminated[t]:
            next_value, continues = 0.0, 0.0
        elif truncated[t]:
            next_value, continues = final_values[t], 0.0
        else:
            next_value = values[t + 1] if t + 1 < T else last_value
            continues = 1.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * continues * running
        advantages[t] = running
    return advantages


def test_gae_matches_hand_computation_with_termination_and_truncation():
    gamma, lam = 0.9, 0.8
    # two env copies, six steps: copy 0 terminates at t=1, copy 1 is truncated at t=3
    rewards = torch.tensor([[1.0, 0.5], [2.0, 0.0], [0.0, 1.0], [1.0, 3.0], [0.5, 0.0], [1.0, 2.0]])
    values = torch.tensor([[0.3, 0.2], [0.1, 0.4], [0.5, 0.6], [0.2, 0.9], [0.7, 0.1], [0.4, 0.3]])
    terminated = torch.zeros(6, 2, dtype=torch.bool)
    truncated = torch.zeros(6, 2, dtype=torch.bool)
    terminated[1, 0] = True
    truncated[3, 1] = True
    final_values = torch.zeros(6, 2)
    final_values[3, 1] = 5.0
    last_values = torch.tensor([0.25, 0.75])
    advantages, returns = compute_gae(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                                      final_values=final_values, last_values=last_values,
                                      discount_factor=gamma, gae_lambda=lam)
    for e in range(2):
        expected = hand_gae(rewards[:, e].tolist(), values[:, e].tolist(), terminated[:, e].tolist(),
                            truncated[:, e].tolist(), final_values[:, e].tolist(), last_values[e].item(), gamma, lam)
        assert advantages[:, e].tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.allclose(returns, advantages + values)
    # spot values worked out by hand
    # copy 0, t=1 terminated: advantage = r - V = 2.0 - 0.1
    assert advantages[1, 0].item() == pytest.approx(1.9)
    # copy 1, t=3 truncated: advantage = r + gamma * V(final) - V = 3 + 0.9 * 5 - 0.9
    assert advantages[3, 1].item() == pytest.approx(6.6)
    # copy 1, t=5 last step bootstraps from last_values: 2 + 0.9 * 0.75 - 0.3
    assert advantages[5, 1].item() == pytest.approx(2.375)


def test_truncation_bootstraps_and_termination_does_not():
    kwargs = dict(rewards=torch.zeros(1, 1), values=torch.zeros(1, 1), final_values=torch.ones(1, 1),
                  last_values=torch.full((1,), 7.0), discount_factor=1.0, gae_lambda=1.0)
    truncated_adv, _ = compute_gae(terminated=torch.zeros(1, 1, dtype=torch.bool),
                                   truncated=torch.ones(1, 1, dtype=torch.bool), **kwargs)
    terminated_adv, _ = compute_gae(terminated=torch.ones(1, 1, dtype=torch.bool),
                                    truncated=torch.zeros(1, 1, dtype=torch.bool), **kwargs)
    assert truncated_adv.item() == 1.0  # value of the final observation, not of the next episode (7)
    assert terminated_adv.item() == 0.0


def test_gae_works_on_an_agent_axis():
    torch.manual_seed(0)
    shape = (5, 3, 2, 1)
    kwargs = dict(rewards=torch.randn(shape), values=torch.randn(shape), terminated=torch.rand(shape) < 0.2,
                  truncated=torch.zeros(shape, dtype=torch.bool), final_values=torch.zeros(shape),
                  last_values=torch.randn(shape[1:]), discount_factor=0.99, gae_lambda=0.95)
    advantages, _ = compute_gae(**kwargs)
    single, _ = compute_gae(**{k: (v[:, :, 1] if torch.is_tensor(v) and v.dim() == 4 else v[:, 1] if torch.is_tensor(v)
                                   else v) for k, v in kwargs.items()})
    assert torch.allclose(advantages[:, :, 1], single)


def own_steps_gae(rewards, values, terminated, truncated, final_values, active, last_value, gamma, lam):
    """Reference for one agent of a turn-based rollout: its rollout cut down to its active steps, each
    taking the rewards and the episode end that came while the agent waited after it.
    """
    steps, T = [], len(rewards)
    for t in range(T):
        if active[t]:
            steps.append({"t": t, "reward": rewards[t], "terminated": terminated[t], "truncated": truncated[t],
                          "final": final_values[t], "value": values[t]})
        elif steps and not (steps[-1]["terminated"] or steps[-1]["truncated"]):
            last = steps[-1]
            last["reward"] += rewards[t]
            last["terminated"], last["truncated"], last["final"] = terminated[t], truncated[t], final_values[t]
    advantages, running = [0.0] * T, 0.0
    for i in reversed(range(len(steps))):
        step = steps[i]
        if step["terminated"]:
            following, continues = 0.0, 0.0
        elif step["truncated"]:
            following, continues = step["final"], 0.0
        else:
            following, continues = (steps[i + 1]["value"] if i + 1 < len(steps) else last_value), 1.0
        running = step["reward"] + gamma * following - step["value"] + gamma * lam * continues * running
        advantages[step["t"]] = running
    return advantages


def test_a_reward_that_reaches_a_waiting_agent_belongs_to_its_last_action():
    # tic-tac-toe's end: player 1 moves at t=0, player 2 wins at t=1, where player 1 gets -1 and terminates
    rewards = torch.tensor([[0.0, 0.0], [-1.0, 1.0]])
    terminated = torch.tensor([[False, False], [True, True]])
    active = torch.tensor([[True, False], [False, True]])
    zeros = torch.zeros(2, 2)
    advantages, _ = compute_gae(rewards=rewards, values=zeros, terminated=terminated, truncated=zeros.bool(),
                                final_values=zeros, last_values=torch.zeros(2), discount_factor=0.9, gae_lambda=0.0,
                                active=active)
    assert advantages[0, 0].item() == pytest.approx(-1.0)  # the losing move
    assert advantages[1, 1].item() == pytest.approx(1.0)   # the winning move
    assert advantages[1, 0].item() == 0.0 and advantages[0, 1].item() == 0.0  # waiting steps carry nothing


def test_gae_over_own_steps_matches_a_rollout_cut_down_to_each_agents_turns():
    torch.manual_seed(3)
    gamma, lam, T, columns = 0.9, 0.8, 40, 6
    rewards, values = torch.randn(T, columns), torch.randn(T, columns)
    terminated, truncated = torch.rand(T, columns) < 0.1, torch.rand(T, columns) < 0.05
    final_values, last_values = torch.randn(T, columns), torch.randn(columns)
    active = torch.rand(T, columns) < 0.5
    advantages, returns = compute_gae(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                                      final_values=final_values, last_values=last_values, discount_factor=gamma,
                                      gae_lambda=lam, active=active)
    for c in range(columns):
        expected = own_steps_gae(rewards[:, c].tolist(), values[:, c].tolist(), terminated[:, c].tolist(),
                                 truncated[:, c].tolist(), final_values[:, c].tolist(), active[:, c].tolist(),
                                 last_values[c].item(), gamma, lam)
        assert advantages[:, c].tolist() == pytest.approx(expected, abs=1e-5)
    assert torch.allclose(returns, advantages + values)


def test_gae_with_every_step_active_is_plain_gae():
    torch.manual_seed(4)
    shape = (30, 4)
    kwargs = dict(rewards=torch.randn(shape), values=torch.randn(shape), terminated=torch.rand(shape) < 0.1,
                  truncated=torch.rand(shape) < 0.1, final_values=torch.randn(shape), last_values=torch.randn(4),
                  discount_factor=0.99, gae_lambda=0.95)
    plain, _ = compute_gae(**kwargs)
    # a fifth column with a waiting step sends the whole rollout through the recursion over each agent's own
    # steps; the four columns where every step is active must come out as plain GAE
    widened = {key: torch.cat([value, value[..., :1]], dim=-1) if torch.is_tensor(value) else value
               for key, value in kwargs.items()}
    active = torch.ones(30, 5, dtype=torch.bool)
    active[7, 4] = False
    own_steps, _ = compute_gae(active=active, **widened)
    assert torch.equal(plain, own_steps[:, :4])


def test_an_action_followed_only_by_waiting_when_the_rollout_or_a_time_limit_ends_is_left_out():
    from marlparts.agents.ppo.advantages import waiting_bootstraps

    # one column per case, 4 steps; the agent acts on odd steps in column 0 and 1, on even ones in column 2
    active = torch.tensor([[False, False, True], [True, True, False], [False, False, True], [True, False, False]])
    terminated = torch.zeros(4, 3, dtype=torch.bool)
    truncated = torch.zeros(4, 3, dtype=torch.bool)
    terminated[1, 1] = True   # column 1: its episode ends at its own action at step 1 (a clean end)
    truncated[3, 2] = True    # column 2: a time limit cuts its episode while it waits after acting at step 2
    next_active = torch.tensor([False, False, True])  # after the rollout: column 0 still waits, column 2 acts
    unusable = waiting_bootstraps(active=active, terminated=terminated, truncated=truncated, next_active=next_active)
    expected = torch.zeros(4, 3, dtype=torch.bool)
    expected[3, 0] = True   # acted at the last step, then waited past the rollout's end
    expected[2, 2] = True   # acted, then the time limit came while it waited
    assert torch.equal(unusable, expected)
    # a time limit at the agent's own move: its final observation is the one after its move, a waiting one
    truncated_at_move = torch.zeros(4, 3, dtype=torch.bool)
    truncated_at_move[1, 0] = True
    marked = waiting_bootstraps(active=active, terminated=terminated, truncated=truncated_at_move,
                                next_active=torch.ones(3, dtype=torch.bool))
    assert marked[:, 0].tolist() == [False, True, False, False]


def test_an_unusable_step_anchors_the_step_before_it_with_its_value_and_stops_the_recursion():
    # the agent moves at t=1 (value 1) and t=3 (value 2), then waits past the rollout's end; the waiting
    # observation's value (100) is untrained and must reach neither move
    active = torch.tensor([[False], [True], [False], [True]])
    zeros = torch.zeros(4, 1)
    unusable = torch.tensor([[False], [False], [False], [True]])
    advantages, _ = compute_gae(rewards=zeros, values=torch.tensor([[0.0], [1.0], [0.0], [2.0]]),
                                terminated=zeros.bool(), truncated=zeros.bool(), final_values=zeros,
                                last_values=torch.tensor([100.0]), discount_factor=0.99, gae_lambda=0.95,
                                active=active, unusable=unusable)
    assert advantages[1, 0].item() == pytest.approx(0.99 * 2.0 - 1.0)  # bootstrapped from the next move's value


def test_ppo_leaves_out_a_move_whose_result_falls_in_the_next_rollout(tmp_path):
    from helpers import build_mappo
    from toy_envs import CallAndAnswerEnv

    from marlparts.envs import wrap_env
    from marlparts.trainers import SequentialTrainer

    env = wrap_env(lambda: CallAndAnswerEnv(), num_envs=1, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=3)
    # moves: caller (t=0), answerer (t=1, game over), caller (t=2): the rollout ends while the caller waits
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    active = memory.get_tensor_by_name("active")[:, 0, :, 0]
    assert active.tolist() == [[True, False], [False, True], [False, False]]  # the caller's move at t=2: left out

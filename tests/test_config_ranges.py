"""Hyperparameters and trainer options outside their ranges are refused at construction, naming key, agent and value."""

import pytest
from helpers import build_mappo
from test_maddpg import build as build_maddpg
from test_value_decomposition import build as build_qmix
from toy_envs import ContinuousEnv, CountingEnv

import marlparts.agents as algorithms
from marlparts.agents import MATD3, QMIX_DEFAULT_CONFIG
from marlparts.agents.common.config_ranges import ALGORITHM_CONFIG_RANGES
from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.base import TRAINER_CONFIG_RANGES
from marlparts.trainers.sequential import SEQUENTIAL_TRAINER_DEFAULT_CONFIG
from marlparts.utils.config import Allowed, check_ranges


def counting(num_envs=2):
    return wrap_env(lambda: CountingEnv(), num_envs=num_envs, seed=0)


@pytest.mark.parametrize("key,value,words", [
    ("discount_factor", 1.5, r"cfg\['discount_factor'\] must be a number in \[0, 1\], got 1.5"),
    ("gae_lambda", -0.5, r"cfg\['gae_lambda'\] must be a number in \[0, 1\], got -0.5"),
    ("ratio_clip", -0.2, r"cfg\['ratio_clip'\] must be a number > 0, got -0.2"),
    ("value_clip", 0.0, r"cfg\['value_clip'\] must be a number > 0, got 0.0"),
    ("learning_epochs", 0, r"cfg\['learning_epochs'\] must be a whole number >= 1, got 0"),
    ("mini_batches", 0, r"cfg\['mini_batches'\] must be a whole number >= 1, got 0"),
    ("rollouts", 0, r"cfg\['rollouts'\] must be a whole number >= 1, got 0"),
    ("learning_rate", -1e-3, r"cfg\['learning_rate'\] must be a number > 0, got -0.001"),
    ("learning_rate", float("nan"), r"cfg\['learning_rate'\] must be a finite number > 0, got nan"),
    ("learning_rate", float("inf"), r"cfg\['learning_rate'\] must be a finite number > 0, got inf"),
    ("grad_norm_clip", -1.0, r"cfg\['grad_norm_clip'\] must be a number >= 0, got -1.0"),
    ("entropy_loss_scale", -0.01, r"cfg\['entropy_loss_scale'\] must be a number >= 0, got -0.01"),
    ("kl_threshold", -1.0, r"cfg\['kl_threshold'\] must be a number >= 0, got -1.0"),
    ("final_entropy_loss_scale", -1.0, r"cfg\['final_entropy_loss_scale'\] must be None or a number >= 0, got -1.0"),
])
def test_a_ppo_hyperparameter_out_of_its_range_is_named_with_its_value(tmp_path, key, value, words):
    with pytest.raises(ValueError, match=words):
        build_mappo(counting(), directory=str(tmp_path), cfg={key: value})


def test_a_per_agent_value_out_of_range_names_the_agent(tmp_path):
    env = counting()
    discounts = {"agent_0": 0.9, "agent_1": 0.99, "agent_2": 2.0}
    with pytest.raises(ValueError, match=r"cfg\['discount_factor'\]\['agent_2'\] must be a number in \[0, 1\], got 2.0"):
        build_mappo(env, share=False, directory=str(tmp_path), cfg={"discount_factor": discounts})


@pytest.mark.parametrize("key,value,error,words", [
    ("write_interval", "ten", TypeError, r"cfg\['experiment'\]\['write_interval'\] must be 'auto' or a whole number "
                                         r">= 1, got 'ten' \(str\)"),
    ("checkpoint_interval", "ten", TypeError, r"cfg\['experiment'\]\['checkpoint_interval'\] must be 'auto' or a whole "
                                              r"number >= 0, got 'ten' \(str\)"),
    ("write_interval", 0, ValueError, r"'write_interval'\] must be 'auto' or a whole number >= 1, got 0"),
    ("checkpoint_interval", -1, ValueError, r"'checkpoint_interval'\] must be 'auto' or a whole number >= 0, got -1"),
    ("checkpoint_interval", 2.5, TypeError, r"'checkpoint_interval'\] must be 'auto' or a whole number >= 0, got 2.5"),
])
def test_an_interval_that_is_not_a_whole_number_is_named_at_construction(tmp_path, key, value, error, words):
    with pytest.raises(error, match=words):
        build_mappo(counting(), directory=str(tmp_path), cfg={"experiment": {key: value}})


@pytest.mark.parametrize("key,value,words", [
    ("discount_factor", 1.5, r"cfg\['discount_factor'\] must be a number in \[0, 1\], got 1.5"),
    ("polyak", 0.0, r"cfg\['polyak'\] must be a number in \(0, 1\], got 0.0"),
    ("polyak", 2.0, r"cfg\['polyak'\] must be a number in \(0, 1\], got 2.0"),
    ("batch_size", 0, r"cfg\['batch_size'\] must be a whole number >= 1, got 0"),
    ("gradient_steps", 0, r"cfg\['gradient_steps'\] must be a whole number >= 1, got 0"),
    ("update_interval", 0, r"cfg\['update_interval'\] must be a whole number >= 1, got 0"),
    ("target_update_interval", 0, r"cfg\['target_update_interval'\] must be a whole number >= 1, got 0"),
    ("learning_starts", -1, r"cfg\['learning_starts'\] must be a whole number >= 0, got -1"),
    ("actor_learning_rate", 0.0, r"cfg\['actor_learning_rate'\] must be a number > 0, got 0.0"),
    ("gumbel_temperature", 0.0, r"cfg\['gumbel_temperature'\] must be a number > 0, got 0.0"),
])
def test_an_off_policy_hyperparameter_out_of_its_range_is_named_with_its_value(key, value, words):
    with pytest.raises(ValueError, match=words):
        build_maddpg(counting(), cfg={key: value})


def test_an_off_policy_per_agent_value_out_of_range_names_the_agent():
    rates = {"agent_0": 1e-3, "agent_1": -1e-3, "agent_2": 1e-3}
    with pytest.raises(ValueError, match=r"cfg\['critic_learning_rate'\]\['agent_1'\] must be a number > 0, got -0.001"):
        build_maddpg(counting(), share=False, cfg={"critic_learning_rate": rates})


@pytest.mark.parametrize("exploration,words", [
    ({"initial_epsilon": 1.5}, r"cfg\['exploration'\]\['initial_epsilon'\] must be a number in \[0, 1\], got 1.5"),
    ({"final_epsilon": -0.1}, r"cfg\['exploration'\]\['final_epsilon'\] must be a number in \[0, 1\], got -0.1"),
    ({"timesteps": -10}, r"cfg\['exploration'\]\['timesteps'\] must be None or a whole number >= 0, got -10"),
])
def test_exploration_settings_out_of_range_are_named(exploration, words):
    cfg = {"exploration": dict(QMIX_DEFAULT_CONFIG["exploration"], **exploration)}
    with pytest.raises(ValueError, match=words):
        build_qmix(counting(), cfg=cfg)


def test_the_settings_of_matd3_and_masac_have_ranges():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    with pytest.raises(ValueError, match=r"cfg\['policy_delay'\] must be a whole number >= 1, got 0"):
        build_maddpg(env, algorithm=MATD3, cfg={"policy_delay": 0})
    with pytest.raises(ValueError, match=r"cfg\['smooth_regularization_std'\] must be a number >= 0, got -0.2"):
        build_maddpg(env, algorithm=MATD3, cfg={"smooth_regularization_std": -0.2})
    from test_masac import build as build_masac
    with pytest.raises(ValueError, match=r"cfg\['initial_entropy_coefficient'\] must be a number > 0, got 0.0"):
        build_masac(env, cfg={"initial_entropy_coefficient": 0.0})


def numeric_keys(config, path=()):
    """Every key of ``config`` (nested sections included) whose default is a number, as a path of keys."""
    for key, value in config.items():
        if isinstance(value, dict) and value and not key.endswith("_kwargs"):
            yield from numeric_keys(value, path + (key,))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield path + (key,)


def range_of(ranges, path):
    for key in path:
        ranges = ranges.get(key) if isinstance(ranges, dict) else None
    return ranges


def test_every_numeric_setting_of_every_algorithm_and_of_the_trainer_has_a_range():
    configs = {name: getattr(algorithms, name) for name in dir(algorithms) if name.endswith("_DEFAULT_CONFIG")}
    assert len(configs) >= 12
    missing = sorted({path for config in configs.values() for path in numeric_keys(config)
                      if not isinstance(range_of(ALGORITHM_CONFIG_RANGES, path), Allowed)})
    assert not missing, f"settings with no range in ALGORITHM_CONFIG_RANGES: {missing}"
    missing = [path for path in numeric_keys(SEQUENTIAL_TRAINER_DEFAULT_CONFIG)
               if not isinstance(range_of(TRAINER_CONFIG_RANGES, path), Allowed)]
    assert not missing, f"trainer settings with no range in TRAINER_CONFIG_RANGES: {missing}"
    for config in configs.values():  # the defaults themselves are in range
        check_ranges(config, ALGORITHM_CONFIG_RANGES)
    check_ranges(SEQUENTIAL_TRAINER_DEFAULT_CONFIG, TRAINER_CONFIG_RANGES, path="trainer cfg")


@pytest.mark.parametrize("cfg,error,words", [
    ({"timesteps": -5}, ValueError, r"trainer cfg\['timesteps'\] must be a whole number >= 0, got -5"),
    ({"timesteps": 12.7}, TypeError, r"trainer cfg\['timesteps'\] must be an int, got 12.7"),
    ({"eval_episodes": 0}, ValueError, r"trainer cfg\['eval_episodes'\] must be a whole number >= 1, got 0"),
    ({"eval_interval": -1}, ValueError, r"trainer cfg\['eval_interval'\] must be a whole number >= 0, got -1"),
    ({"eval_num_envs": 0}, ValueError, r"trainer cfg\['eval_num_envs'\] must be None or a whole number >= 1, got 0"),
    ({"progress_interval": "fast"}, TypeError, r"trainer cfg\['progress_interval'\] must be a number, got 'fast'"),
    ({"progress_interval": -1.0}, ValueError, r"trainer cfg\['progress_interval'\] must be a number >= 0, got -1.0"),
    ({"disable_progressbar": "yes"}, TypeError, r"trainer cfg\['disable_progressbar'\] must be a bool, got 'yes'"),
    ({"video_fps": 0}, ValueError, r"trainer cfg\['video_fps'\] must be a number > 0, got 0"),
])
def test_a_trainer_option_of_the_wrong_type_or_range_is_named_at_construction(tmp_path, cfg, error, words):
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path))
    with pytest.raises(error, match=words):
        SequentialTrainer(env=env, agents=agent, cfg=cfg)


def test_a_fractional_frame_rate_is_a_valid_trainer_option(tmp_path):
    env = counting()
    trainer = SequentialTrainer(env=env, agents=build_mappo(env, directory=str(tmp_path)), cfg={"video_fps": 29.97})
    assert trainer.cfg["video_fps"] == 29.97


@pytest.mark.parametrize("episodes,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError)])
def test_eval_with_a_number_of_episodes_that_is_not_a_positive_whole_number_is_refused(tmp_path, episodes, error):
    env = counting()
    trainer = SequentialTrainer(env=env, agents=build_mappo(env, directory=str(tmp_path)),
                                cfg={"disable_progressbar": True})
    with pytest.raises(error, match=rf"eval\(episodes=\) must be a whole number >= 1, got {episodes}"):
        trainer.eval(episodes=episodes)
    assert trainer.eval(episodes=1)["episodes"] == 1

import json
import pathlib

import pytest
import torch
from example_runner import EXAMPLE_ENVIRONMENT

ROOT = pathlib.Path(__file__).resolve().parent.parent




@pytest.fixture
def run_script(example_runner):
    """Run the script at ``path`` with ``arguments``; its standard output (the run must succeed)."""
    def run(path, *arguments):
        done = example_runner.run([path, *arguments], env=EXAMPLE_ENVIRONMENT)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout
    return run


@pytest.fixture
def run_example(run_script):
    """Run ``examples/mpe/<name>.py`` with ``arguments``; its standard output (the run must succeed)."""
    return lambda name, *arguments: run_script(ROOT / "examples" / "mpe" / f"{name}.py", *arguments)


@pytest.mark.parametrize("name", ["simple_spread_mappo", "simple_spread_ippo"])
def test_example_runs_as_it_stands(name, tmp_path, run_example):
    output = run_example(name, "--timesteps", 400, "--num-envs", 8, "--workers", 2, "--seed", 1, "--episodes", 24,
                         "--directory", tmp_path)
    assert "greedy evaluation over 24 episodes: mean return" in output
    checkpoints = list(tmp_path.glob("*/checkpoints/final_agent.pt"))
    assert len(checkpoints) == 1


@pytest.mark.parametrize("name", ["simple_spread_maddpg", "simple_spread_matd3"])
def test_off_policy_example_runs_as_it_stands(name, tmp_path, run_example):
    output = run_example(name, "--timesteps", 800, "--num-envs", 4, "--episodes", 8, "--directory", tmp_path)
    assert "greedy evaluation over 8 episodes: mean return" in output


def test_example_resumes_from_a_checkpoint_and_evaluates_one(tmp_path, run_example):
    common = ("--num-envs", 8, "--episodes", 16, "--directory", tmp_path)
    run_example("simple_spread_mappo", "--timesteps", 400, *common)
    (first,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    resumed = run_example("simple_spread_mappo", "--timesteps", 400, "--checkpoint", first, *common)
    assert len(list(tmp_path.iterdir())) == 1, "the resumed run writes into the same experiment folder"
    state = torch.load(first, weights_only=True)  # overwritten by the resumed run's final checkpoint
    assert state["counters"]["timestep"] == 100  # 2 x 400 env steps over 8 copies
    assert "greedy evaluation over 16 episodes" in resumed
    evaluated = run_example("simple_spread_mappo", "--eval", "--checkpoint", first, *common)
    assert "checkpoint:" not in evaluated and "greedy evaluation over 16 episodes" in evaluated


@pytest.mark.parametrize("name", ["balance_mappo", "navigation_ippo"])
def test_vmas_example_runs_as_it_stands_and_evaluates_its_checkpoint(name, tmp_path, run_script):
    pytest.importorskip("vmas")
    script = ROOT / "examples" / "vmas" / f"{name}.py"
    common = ("--num-envs", 16, "--episodes", 16, "--directory", tmp_path)

    def run(*arguments):
        return run_script(script, *arguments)

    trained = run("--timesteps", 1024, *common)
    assert "trained 1024 env steps" in trained and "greedy evaluation over 16 episodes: mean return" in trained
    (checkpoint,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    evaluated = run("--eval", "--checkpoint", checkpoint, *common)
    assert "checkpoint:" not in evaluated and "greedy evaluation over 16 episodes" in evaluated


def test_vmas_graph_example_trains_with_some_agents_and_evaluates_with_more(tmp_path, run_script):
    pytest.importorskip("vmas")
    pytest.importorskip("torch_geometric")
    script = ROOT / "examples" / "vmas" / "navigation_ippo.py"
    common = ("--model", "gnn", "--num-envs", 8, "--episodes", 8, "--directory", tmp_path)
    trained = run_script(script, "--agents", 3, "--timesteps", 512, *common)
    assert "trained 512 env steps" in trained
    (checkpoint,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    evaluated = run_script(script, "--agents", 5, "--eval", "--checkpoint", checkpoint, *common)
    assert "greedy evaluation over 8 episodes: mean return" in evaluated


@pytest.mark.parametrize("name", ["tictactoe_ippo", "connect_four_ippo"])
def test_turn_based_example_trains_by_self_play_and_plays_a_random_player_on_each_seat(name, tmp_path, run_script):
    script = ROOT / "examples" / "pettingzoo" / f"{name}.py"
    common = ("--num-envs", 8, "--games", 20, "--directory", tmp_path)

    def run(*arguments):
        return run_script(script, *arguments)

    trained = run("--timesteps", 512, *common)
    assert "trained 512 moves" in trained
    seats = [line for line in trained.splitlines() if "against a random player, 20 games: win" in line]
    expected_seats = ["player_0", "player_1"] if name == "connect_four_ippo" else ["player_1", "player_2"]
    assert [line.split()[0] for line in seats] == expected_seats
    (checkpoint,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    evaluated = run("--eval", "--checkpoint", checkpoint, *common)
    assert "trained" not in evaluated and len(evaluated.splitlines()) == 2


@pytest.mark.parametrize("name, first_team", [("simple_tag_teams", "MAPPO"), ("simple_adversary_teams", "MAPPO")])
def test_team_example_trains_both_teams_and_plays_each_against_a_random_team(name, first_team, tmp_path, run_example):
    output = run_example(name, "--timesteps", 400, "--num-envs", 8, "--episodes", 8, "--directory", tmp_path)
    checkpoints = sorted(tmp_path.glob("*/checkpoints/final_agent.pt"))
    assert len(checkpoints) == 2 and f"checkpoint of {first_team}" in output
    assert output.count("against a random") + output.count("against random") == 2
    by_team = {path.parent.parent.name.rsplit("_", 1)[1]: path for path in checkpoints}
    second_team = next(team for team in by_team if team != first_team)
    evaluated = run_example(name, "--eval", "--checkpoint", by_team[first_team], by_team[second_team],
                            "--num-envs", 8, "--episodes", 8, "--directory", tmp_path)
    assert "checkpoint of" not in evaluated and evaluated.count("random") == 4


def test_heterogeneous_agents_example_runs_as_it_stands(tmp_path, run_example):
    output = run_example("simple_speaker_listener_mappo", "--timesteps", 400, "--num-envs", 8, "--episodes", 8,
                         "--directory", tmp_path)
    assert "greedy evaluation over 8 episodes: mean return" in output
    assert "speaker_0" in output and "listener_0" in output and "(random " in output


@pytest.mark.parametrize("name", ["knights_archers_zombies_mappo", "knights_archers_zombies_ippo"])
def test_agents_that_leave_example_runs_as_it_stands_and_evaluates_its_checkpoint(name, tmp_path, run_script):
    script = ROOT / "examples" / "pettingzoo" / f"{name}.py"
    common = ("--num-envs", 4, "--episodes", 2, "--max-cycles", 60, "--directory", tmp_path)

    def run(*arguments):
        return run_script(script, *arguments)

    trained = run("--timesteps", 512, *common)  # 2 updates of 64 steps of the 4 copies
    assert "trained 512 env steps" in trained and "zombies killed per agent" in trained and "(random actions:" in trained
    (checkpoint,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    evaluated = run("--eval", "--checkpoint", checkpoint, *common)
    assert "trained" not in evaluated and "greedy evaluation over 2 episodes" in evaluated


def test_image_observation_example_runs_as_it_stands(tmp_path, run_script):
    """SISL pursuit's 7x7x3 views through a shared CNN policy and critic (marlparts.models.cnn)."""
    output = run_script(ROOT / "examples" / "pettingzoo" / "pursuit_ippo.py", "--timesteps", 256, "--num-envs", 2,
                        "--episodes", 2, "--max-cycles", 25, "--directory", tmp_path)  # two updates
    assert "trained 256 env steps" in output
    assert "evaluation over 2 episodes, return per pursuer: sampled" in output and "(random actions:" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 1


def test_pixel_example_runs_as_it_stands(tmp_path, run_script):
    """Pistonball's frames through SuperSuit into one CNN that is the pistons' policy and critic."""
    pytest.importorskip("supersuit")
    pytest.importorskip("pymunk")
    arguments = ("--timesteps", 32, "--num-envs", 1, "--max-cycles", 4, "--threads", 1, "--episodes", 2,
                 "--evaluations", 2, "--directory", tmp_path, "--resume")
    output = run_script(ROOT / "examples" / "pettingzoo" / "pistonball_ippo.py", *arguments)
    assert "trained 32 env steps" in output
    assert "evaluation over 2 episodes, return per piston: sampled" in output and "(random actions:" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 1
    (curve,) = tmp_path.glob("*/evaluations.jsonl")  # the learning curve the benchmark runner reads
    assert [json.loads(line)["env_steps"] for line in curve.read_text().splitlines()] == [0, 32, 32]
    assert (tmp_path / "run_settings.json").is_file()  # --resume recorded the run (it goes on as the LBF examples do)


@pytest.mark.parametrize("path, package, copies, timesteps, options", [  # 1 update or more between evaluations
    ("lbf/foraging_mappo.py", "lbforaging", 8, 800, ()), ("lbf/foraging_ippo.py", "lbforaging", 8, 800, ()),
    ("lbf/foraging_ia2c.py", "lbforaging", 8, 800, ()), ("lbf/foraging_maa2c.py", "lbforaging", 8, 800, ()),
    ("rware/warehouse_mappo.py", "rware", 2, 400, ("--max-steps", 50))])  # RWARE's own episodes are 500 steps
def test_benchmark_protocol_example_runs_as_it_stands(path, package, copies, timesteps, options, tmp_path, run_script):
    """The examples of EPyMARL's tasks evaluate at equal intervals from the start, with sampled and greedy actions,
    and report team returns summed over the agents; each evaluation has its checkpoint, and ``--resume`` goes on
    from the newest."""
    pytest.importorskip(package)
    arguments = ("--timesteps", timesteps, "--num-envs", copies, "--evaluations", 3, "--episodes", copies, *options,
                 "--directory", tmp_path, "--resume")  # nothing to go on from yet: a fresh start
    output = run_script(ROOT / "examples" / path, *arguments)
    assert f"trained {timesteps} env steps" in output and f"evaluation over {copies} episodes" in output
    assert "sampled actions" in output and "greedy" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 1
    (curve,) = tmp_path.glob("*/evaluations.jsonl")
    points = [json.loads(line) for line in curve.read_text().splitlines()]
    assert [point["env_steps"] for point in points] == [0, timesteps // 2, timesteps, timesteps]  # the last: eval()
    assert all(len(point["sampled"]["episode_returns"]) == copies for point in points)
    steps = timesteps // copies
    written = {checkpoint.name for checkpoint in tmp_path.glob("*/checkpoints/agent_*.pt")}
    assert {f"agent_{steps // 2}.pt", f"agent_{steps}.pt"} <= written
    again = run_script(ROOT / "examples" / path, *arguments)  # goes on from the checkpoint of the last step
    assert "trained 0 env steps" in again and len([path for path in tmp_path.iterdir() if path.is_dir()]) == 1
    if path == "lbf/foraging_mappo.py":  # the same three lines in each example: one shows the refusal
        with pytest.raises(AssertionError, match=r"holds a run of other settings \(seed 0 there, 1 here\)"):
            run_script(ROOT / "examples" / path, "--seed", 1, *arguments)  # another run in the same folder


@pytest.mark.parametrize("path", ["lbf/foraging_ia2c.py", "lbf/foraging_maa2c.py"])
def test_a2c_examples_give_the_critic_the_steps_asked_for(path, tmp_path, run_script):
    """``--value-min-steps 3``: the critic's optimizer steps three times per update, the policy's once."""
    pytest.importorskip("lbforaging")
    run_script(ROOT / "examples" / path, "--timesteps", 1600, "--num-envs", 8, "--evaluations", 0, "--episodes", 2,
               "--directory", tmp_path, "--value-min-steps", 3)
    (checkpoint,) = tmp_path.glob("*/checkpoints/final_agent.pt")
    modules = torch.load(checkpoint, weights_only=False)["modules"]
    steps = {name.split(":")[1].split("[")[0]: {int(state["step"]) for state in module["state"].values()}
             for name, module in modules.items() if name.startswith("optimizer:")}
    (policy_steps,), (value_steps,) = steps["policy"], steps["value"]
    assert policy_steps > 0 and value_steps == 3 * policy_steps


def test_lbf_vdn_example_runs_as_it_stands(tmp_path, run_script):
    pytest.importorskip("lbforaging")
    output = run_script(ROOT / "examples" / "lbf" / "foraging_vdn.py", "--timesteps", 1600, "--num-envs", 8,
                        "--episodes", 4, "--directory", tmp_path)
    assert "trained 1600 env steps" in output and "greedy evaluation over 4 episodes" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 1


@pytest.mark.parametrize("name,options", [("simple_spread_happo", ()), ("simple_speaker_listener_happo", ()),
                                          ("simple_spread_vdac", ()), ("simple_spread_vdac", ("--mixer",)),
                                          ("simple_spread_coma", ())])
def test_on_policy_example_runs_as_it_stands(name, options, tmp_path, run_example):
    output = run_example(name, *options, "--timesteps", 400, "--num-envs", 4, "--episodes", 8, "--directory", tmp_path)
    assert "greedy evaluation over 8 episodes: mean return" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 1


def test_battle_example_trains_both_teams_and_reports_every_pairing(tmp_path, run_script):
    pytest.importorskip("magent2")
    output = run_script(ROOT / "examples" / "magent2" / "battle_mfq_vs_mfac.py", "--timesteps", 1600, "--num-envs", 4,
                        "--battles", 4, "--directory", tmp_path)
    for pairing in ("MFQ (red) against random", "MFAC (blue) against random", "MFQ (red) against MFAC (blue)"):
        assert f"{pairing}: red wins" in output
    assert len(list(tmp_path.glob("*/checkpoints/final_agent.pt"))) == 2
    results = json.loads((tmp_path / "battles.json").read_text())
    for result in results.values():  # every battle counted once, the survivors read off the env
        assert abs(result["red wins"] + result["blue wins"] + result["draws"] - 1.0) < 1e-9
        assert 0.0 <= result["red alive"] <= 12.0 and 0.0 <= result["blue alive"] <= 12.0

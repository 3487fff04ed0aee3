"""EPyMARL's own code on today's LBF, at this grid's budget: its runs' evaluation curves beside ours.

EPyMARL (https://github.com/uoe-agents/epymarl) is run as its README says, with its own algorithm configs
and the budget and protocol of ``grid.json``: 2M env steps counted over its parallel envs, an evaluation of 100
episodes every 50k env steps (40 or 41 over the run, as its loop stops), actions sampled from the policy as its
``soft_policies`` selector does in test mode. It needs ``torch sacred pyyaml numpy gymnasium lbforaging``; its
``src/envs/__init__.py`` imports the optional ``smaclite`` package unconditionally, so without that package the
import has to be made conditional::

    python src/main.py --config=ia2c --env-config=gymma with env_args.time_limit=50 \\
        env_args.key="lbforaging:Foraging-2s-8x8-2p-2f-coop-v3" t_max=2000000 test_interval=50000 \\
        test_nepisode=100 seed=0

and on RWARE with the grid's 4M env steps and 21 evaluations of 16 episodes, MAPPO with the paper's RWARE
settings (the paper's hyperparameters for it: feed-forward, learning rate 5e-4, 10-step returns, rewards not
standardised)::

    python src/main.py --config=mappo --env-config=gymma with env_args.time_limit=500 \\
        env_args.key="rware:rware-tiny-2ag-v2" t_max=4000000 test_interval=200000 test_nepisode=16 \\
        lr=0.0005 q_nstep=10 use_rnn=False standardise_rewards=False seed=0

Each run writes ``results/sacred/<algorithm>/<env key>/<id>/`` (Sacred's ``config.json`` and ``info.json``).
This script reads such folders and writes, per run, the evaluation curve (``test_return_mean`` at
``test_return_mean_T``: the team return, summed over the agents, as the grid's) with EPyMARL's two
statistics of a run, the maximum and the average over its evaluations, and the same of this library's runs
of the same algorithm and task in the grid's results folder::

    python benchmarks/epymarl/epymarl_code_runs.py ~/epymarl/results/sacred/ia2c/*/* \\
        --grid benchmarks/results/epymarl --output benchmarks/results/epymarl/epymarl_code_runs.json
"""

import argparse
import json
import pathlib
import statistics
from typing import Dict, List

from marlparts.benchmark import load_results


def sacred_run(folder: pathlib.Path) -> Dict:
    """One EPyMARL run: algorithm, task, seed and its sampled evaluation curve."""
    config = json.loads((folder / "config.json").read_text())
    info = json.loads((folder / "info.json").read_text())
    returns = [float(point["value"]) if isinstance(point, dict) else float(point) for point in info["test_return_mean"]]
    steps = [int(step) for step in info["test_return_mean_T"]]
    task = config["env_args"]["key"].split(":")[-1]
    return {"algorithm": config["name"].upper(), "task": task, "seed": config["seed"], "env_steps": steps,
            "sampled": returns, "t_max": config["t_max"], "finished": steps[-1] >= config["t_max"] - config["test_interval"]}


def grid_runs(results: List[Dict], algorithm: str, task: str) -> List[Dict]:
    """This library's finished runs of ``algorithm`` on ``task`` among the grid's ``results``
    (:func:`marlparts.benchmark.load_results`).
    """
    return [{"seed": run["seed"], "env_steps": [point["env_steps"] for point in run["evaluations"]],
             "sampled": [point["sampled"]["mean_return"] for point in run["evaluations"]]}
            for run in results if (run["algorithm"], run["task"]) == (algorithm, task)]


def statistics_of(curve: List[float]) -> Dict[str, float]:
    """EPyMARL's statistics of one run: its best evaluation and its average over the evaluations."""
    return {"maximum": max(curve), "average": statistics.fmean(curve)}


def main() -> None:
    """Read the EPyMARL runs, set them beside the grid's, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=pathlib.Path, help="EPyMARL's Sacred run folders")
    parser.add_argument("--grid", type=pathlib.Path, default=pathlib.Path("benchmarks/results/epymarl"))
    parser.add_argument("--output", type=pathlib.Path,
                        default=pathlib.Path("benchmarks/results/epymarl/epymarl_code_runs.json"))
    args = parser.parse_args()
    runs = [sacred_run(folder) for folder in args.runs if (folder / "info.json").exists()]
    runs = [run for run in runs if run["finished"]]
    results = load_results(str(args.grid))
    figures = []
    for key in sorted({(run["algorithm"], run["task"]) for run in runs}):
        theirs = [run for run in runs if (run["algorithm"], run["task"]) == key]
        ours = grid_runs(results, *key)
        entry = {"algorithm": key[0], "task": key[1],
                 "epymarl_code": [{**run, **statistics_of(run["sampled"])} for run in theirs],
                 "marlparts": [{**run, **statistics_of(run["sampled"])} for run in ours]}
        figures.append(entry)
        for name in ("epymarl_code", "marlparts"):
            for run in entry[name]:
                print(f"{key[0]:6s} {key[1]:32s} {name:13s} seed {run['seed']}: {len(run['sampled'])} evaluations, "
                      f"average {run['average']:.3f}, maximum {run['maximum']:.3f}, last {run['sampled'][-1]:.3f}")
    args.output.write_text(json.dumps(figures, indent=1))
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()

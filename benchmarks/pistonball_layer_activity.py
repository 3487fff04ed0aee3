"""How much of the pistonball example's encoder stays alive as it trains: read from a grid's checkpoints.

For every seed of a grid folder made by ``benchmarks/pixels/grid.json`` (``python -m marlparts.benchmark run``),
loads the checkpoints the example wrote as it trained (``agent_<vectorized step>.pt``, one every few thousand env
steps) and feeds one fixed batch of observations (20 pistons at 4 moments of an episode of random moves, as
``benchmarks/pistonball_features.py`` builds it) through the encoder. For each ReLU of the encoder (after each of
the three convolutions and after the 512 units) it prints and writes the share of units (channel and position, or
feature) that are positive for some observation of the batch: a unit at zero for every frame passes no gradient
and no longer tells frames apart. The checkpoints must come from the example as it is now (its model's layers);
the env copies that each run's ``run.json`` names (``--num-envs``, else the example's default) give the env steps of
a vectorized step. Checkpoints from before the example centred its frames on their mean
(``benchmarks/results/pixels_8_copies``) take ``--uncentred``: the encoder's input layer is then one that does
not centre (a checkpoint of the other kind refuses to load, naming the tensor ``centred_on_image_mean``).

    python benchmarks/pistonball_layer_activity.py benchmarks/results/pixels_centred \\
        --output benchmarks/results/pixels_centred/layer_activity.json
"""

import argparse
import json
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "pettingzoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pistonball_ippo as example  # noqa: E402
from pistonball_features import probe_batch  # noqa: E402

from marlparts.models.convolutional import ImageInput  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402
from marlparts.utils.run_folders import step_of_checkpoint  # noqa: E402


def layer_activity(encoder: torch.nn.Module, batch: torch.Tensor) -> list:
    """The share of units after each ReLU of ``encoder`` that are positive for some row of ``batch``."""
    shares = []
    with torch.no_grad():
        outputs = batch
        for layer in _leaf_layers(encoder):
            outputs = layer(outputs)
            if isinstance(layer, torch.nn.ReLU):
                shares.append(round((outputs > 0).flatten(1).any(dim=0).float().mean().item(), 4))
    return shares


def _leaf_layers(module: torch.nn.Module) -> list:
    """The layers of nested ``nn.Sequential`` containers in the order they run."""
    if isinstance(module, torch.nn.Sequential):
        return [leaf for child in module for leaf in _leaf_layers(child)]
    return [module]


def checkpoints_by_step(seed_folder: pathlib.Path) -> list:
    """``(vectorized step, path)`` of every ``agent_<step>.pt`` under ``seed_folder``, in step order."""
    steps = ((step_of_checkpoint(path.name), path) for path in seed_folder.rglob("agent_*.pt"))
    return sorted((step, path) for step, path in steps if step is not None)


def num_envs_of(seed_folder: pathlib.Path) -> int:
    """The env copies the run in ``seed_folder`` stepped: ``--num-envs`` among its ``run.json``'s arguments, else
    the example's default."""
    for run_file in sorted(seed_folder.glob("attempt_*/run.json")):
        arguments = json.loads(run_file.read_text()).get("arguments", [])
        if "--num-envs" in arguments:
            return int(arguments[arguments.index("--num-envs") + 1])
    return example.NUM_ENVS


def main() -> None:
    """Probe every checkpoint of every seed of the grid folder, print and write the shares."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid_folder", help="the --out folder of a pistonball grid run")
    parser.add_argument("--uncentred", action="store_true",
                        help="feed the frames uncentred (checkpoints trained before subtract_image_mean)")
    parser.add_argument("--output", help="JSON file to write (default: <grid_folder>/layer_activity.json)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    grid = pathlib.Path(args.grid_folder)
    seeds = sorted(grid.glob("runs/pettingzoo/pistonball_v6/IPPO/seed_*"))
    if not seeds:
        raise SystemExit(f"no runs/pettingzoo/pistonball_v6/IPPO/seed_* folders under {grid}")
    batch = probe_batch(seed=1001)
    env = example.make_env(num_envs=1, seed=0)
    scratch = tempfile.TemporaryDirectory()
    set_seed(0)  # the first row: the model as the example initialises it for seed 0
    agent = example.make_agent(env, scratch.name)
    encoder = agent.models[env.possible_agents[0]]["policy"].encoder
    if args.uncentred:  # the input layer as it was before the example centred its frames
        encoder[0][0] = ImageInput(encoder[0][0].image_shape, channels_last=True, input_scale=1 / 255)
    rows = [{"seed": None, "env_steps": 0, "checkpoint": "initialisation (seed 0)",
             "active": layer_activity(encoder, batch)}]
    print(json.dumps(rows[-1]), flush=True)
    copies = {}
    for seed_folder in seeds:
        copies[seed_folder.name] = num_envs_of(seed_folder)
        for step, path in checkpoints_by_step(seed_folder):
            agent.load(str(path))
            rows.append({"seed": int(seed_folder.name.split("_")[1]), "env_steps": step * copies[seed_folder.name],
                         "checkpoint": str(path.relative_to(grid)), "active": layer_activity(encoder, batch)})
            print(json.dumps(rows[-1]), flush=True)
    env.close()
    scratch.cleanup()
    output = pathlib.Path(args.output) if args.output else grid / "layer_activity.json"
    output.write_text(json.dumps({"layers": ["conv 1", "conv 2", "conv 3", "512 features"], "probe_observations":
                                  int(batch.shape[0]), "num_envs": copies, "centred": not args.uncentred,
                                  "rows": rows}, indent=1) + "\n")
    print(f"written to {output}")


if __name__ == "__main__":
    main()

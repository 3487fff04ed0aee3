"""What the package's extras install: each must bring what the envs it names import."""

import configparser
import pathlib

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parent.parent


def extra(name):
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return [Requirement(line) for line in config["options.extras_require"][name].strip().splitlines()]


def test_the_games_extra_brings_pettingzoo_s_own_extras_of_its_env_families():
    """pistonball and KAZ (butterfly) import pymunk; pursuit and multiwalker (sisl) pymunk and Box2D; chess and the
    card games (classic) chess and rlcard: PettingZoo's own extras list them, for each PettingZoo version.
    """
    pettingzoo = [requirement for requirement in extra("games") if requirement.name == "pettingzoo"]
    assert pettingzoo, extra("games")
    assert {"butterfly", "sisl", "classic"} <= set().union(*(requirement.extras for requirement in pettingzoo))

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["simple_spread_mappo", "simple_spread_ippo"])
def test_example_runs_as_it_stands(name, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "mpe" / f"{name}.py"), "--timesteps", "3200",
                           "--num-envs", "8", "--workers", "2", "--seed", "1", "--directory", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env={"TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "greedy evaluation over 100 episodes: mean return" in done.stdout
    checkpoints = list(tmp_path.glob("*/checkpoints/final_agent.pt"))
    assert len(checkpoints) == 1

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _quiet_progress(monkeypatch):
    """Keep tqdm bars out of the test log."""
    monkeypatch.setenv("TQDM_DISABLE", "1")


@pytest.fixture(scope="session")
def example_runner():
    """Runs example scripts each in a process of its own, forked from one that has imported PyTorch and the
    library (tests/example_runner.py): per test worker, one server per set of start-up variables."""
    from example_runner import ExampleRunner

    runner = ExampleRunner()
    yield runner
    runner.close()

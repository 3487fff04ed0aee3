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

"""LeanAdam against torch.optim.Adam: the same parameters, state and state_dict, step for step."""

import copy

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from marlparts.agents import adam as adam_module
from marlparts.agents.adam import LeanAdam


def twin_parameters(seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(3, 18, 64), (3, 1, 64), (3, 64, 5), (7,)]
    first = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]
    return first, [torch.nn.Parameter(parameter.detach().clone()) for parameter in first]


def give_gradients(parameters, step, skip=None):
    generator = torch.Generator().manual_seed(100 + step)
    for index, parameter in enumerate(parameters):
        parameter.grad = None if index == skip else torch.randn(parameter.shape, generator=generator)


def assert_same(ours, theirs, lean, reference):
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    mine, other = lean.state_dict(), reference.state_dict()
    assert mine["param_groups"] == other["param_groups"]
    for position in other["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(mine["state"][position][key], other["state"][position][key]), (position, key)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_lean_adam_steps_as_torch_adam_through_rate_changes_missing_gradients_and_loads(weight_decay, monkeypatch):
    ours, theirs = twin_parameters()
    lean = LeanAdam(ours, lr=3e-3, weight_decay=weight_decay)
    reference = torch.optim.Adam(theirs, lr=3e-3, weight_decay=weight_decay, fused=True)
    torch_steps = []
    original = adam_module._TORCH_ADAM_STEP
    monkeypatch.setattr(adam_module, "_TORCH_ADAM_STEP", lambda *a: torch_steps.append(1) or original(*a))
    for step in range(12):
        if step == 5:  # a scheduler's change of the learning rate
            for optimizer in (lean, reference):
                optimizer.param_groups[0]["lr"] = 1e-3
        skip = 2 if step == 7 else None  # a parameter without a gradient: PyTorch's path leaves it alone
        give_gradients(ours, step, skip)
        give_gradients(theirs, step, skip)
        lean.step()
        reference.step()
        assert_same(ours, theirs, lean, reference)
        if step == 9:  # a load replaces the state; the steps after it go on from the loaded numbers
            saved = reference.state_dict()
            lean.load_state_dict(copy.deepcopy(saved))  # (a load keeps the given tensors where it can)
            reference.load_state_dict(saved)
    assert len(torch_steps) == 3  # the first step, the one with a missing gradient, the first after the load


def test_lean_adam_refuses_an_unfused_configuration():
    with pytest.raises(ValueError, match="fused must be True, got False"):
        LeanAdam([torch.nn.Parameter(torch.zeros(2))], fused=False)


def test_lean_adam_takes_torchs_path_for_amsgrad_and_matches_it():
    ours, theirs = twin_parameters(1)
    lean = LeanAdam(ours, lr=1e-2, amsgrad=True)
    reference = torch.optim.Adam(theirs, lr=1e-2, amsgrad=True, fused=True)
    for step in range(4):
        give_gradients(ours, step)
        give_gradients(theirs, step)
        lean.step()
        reference.step()
    assert lean._groups is None
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_lean_adam_runs_step_hooks_and_counts_its_steps_for_schedulers(recwarn):
    parameters, _ = twin_parameters(2)
    lean = LeanAdam(parameters, lr=1e-2)
    calls = []
    lean.register_step_pre_hook(lambda optimizer, args, kwargs: calls.append("pre"))
    lean.register_step_post_hook(lambda optimizer, args, kwargs: calls.append("post"))
    every = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: calls.append("all"))
    try:
        scheduler = torch.optim.lr_scheduler.StepLR(lean, step_size=1, gamma=0.5)
        for step in range(3):
            give_gradients(parameters, step)
            lean.step()
            scheduler.step()
    finally:
        every.remove()
    assert calls == ["pre", "post", "all"] * 3
    assert lean.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5 ** 3)
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]


def test_lean_adam_skips_a_step_that_a_grad_scaler_found_infinite_as_torch_adam_does():
    ours, theirs = twin_parameters(3)
    lean = LeanAdam(ours, lr=1e-2)
    reference = torch.optim.Adam(theirs, lr=1e-2, fused=True)
    for step in range(3):
        give_gradients(ours, step)
        give_gradients(theirs, step)
        for optimizer in (lean, reference):  # as GradScaler.step hands them to a fused optimizer
            optimizer.grad_scale, optimizer.found_inf = None, torch.tensor(1.0 if step == 1 else 0.0)
            optimizer.step()
            del optimizer.grad_scale, optimizer.found_inf
        assert_same(ours, theirs, lean, reference)


@pytest.mark.parametrize("option, value", [("maximize", True), ("amsgrad", True), ("weight_decay", 0.1)])
def test_lean_adam_follows_an_option_changed_after_its_first_step(option, value):
    ours, theirs = twin_parameters(4)
    lean = LeanAdam(ours, lr=1e-2)
    reference = torch.optim.Adam(theirs, lr=1e-2, fused=True)
    for step in range(4):
        if step == 2:
            for optimizer in (lean, reference):
                optimizer.param_groups[0][option] = value
                if option == "amsgrad":  # as torch's step would make it for a state made without amsgrad
                    for parameter in optimizer.param_groups[0]["params"]:
                        optimizer.state[parameter]["max_exp_avg_sq"] = torch.zeros_like(parameter)
        give_gradients(ours, step)
        give_gradients(theirs, step)
        lean.step()
        reference.step()
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), (option, step)


def test_a_copy_of_lean_adam_steps_as_the_original():
    ours, theirs = twin_parameters(5)
    lean = LeanAdam(ours, lr=1e-2)
    give_gradients(ours, 0)
    lean.step()
    with torch.no_grad():
        for a, b in zip(ours, theirs):
            b.copy_(a)
    twin = LeanAdam(theirs, lr=1e-2)
    twin.load_state_dict(copy.deepcopy(lean.state_dict()))
    copied = copy.deepcopy(lean)  # (what frozen copies of a trained model do)
    give_gradients(ours, 1)
    lean.step()
    give_gradients(theirs, 1)
    twin.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert copied.state_dict()["state"][0]["step"] == 1
    for parameter in copied.param_groups[0]["params"]:
        parameter.grad = torch.ones_like(parameter)
    copied.step()
    assert copied.state_dict()["state"][0]["step"] == 2

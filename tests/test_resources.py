import torch

from marlparts.resources import KLAdaptiveLR, RunningStandardScaler


def test_running_scaler_matches_batch_statistics_and_inverts():
    torch.manual_seed(0)
    data = torch.randn(1000, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -1.0, 0.5])
    scaler = RunningStandardScaler(3, clip_threshold=100.0)
    for chunk in data.split(137):
        scaler(chunk, train=True)
    # the statistics start as one pseudo-sample of mean 0 and variance 1, merged with the data exactly
    n = data.shape[0]
    mean, variance = data.double().mean(0), data.double().var(0, unbiased=False)
    expected_mean = mean * n / (n + 1)
    expected_variance = (1.0 + n * variance + mean.square() * n / (n + 1)) / (n + 1)
    assert torch.allclose(scaler.running_mean, expected_mean, atol=1e-5)
    assert torch.allclose(scaler.running_variance, expected_variance, rtol=1e-4)
    standardised = scaler(data)
    assert torch.allclose(standardised.mean(0), torch.zeros(3), atol=2e-2)
    assert torch.allclose(scaler(standardised, inverse=True), data, atol=1e-4)


def test_running_scaler_takes_exact_batch_statistics_of_offset_and_half_precision_rows():
    # rows far from zero: the rounding of the batch mean must not bias the batch variance
    torch.manual_seed(0)
    rows = (torch.randn(49152, 4, dtype=torch.float64) * 1e-2 + 1e4).float()
    folded = {}
    scaler = RunningStandardScaler(4)
    scaler._fold = lambda mean, variance, count: folded.update(mean=mean, variance=variance, count=count)
    scaler.update(rows)
    exact_mean, exact_variance = rows.double().mean(0), rows.double().var(0, unbiased=False)
    assert folded["count"] == 49152
    assert torch.allclose(folded["mean"], exact_mean, rtol=1e-7, atol=0)
    assert torch.allclose(folded["variance"], exact_variance, rtol=1e-6, atol=0)
    # half-precision rows: deviations of 300 square past float16's range, yet the variance stays finite and right
    half = torch.cat([torch.randn(4095, 4), torch.full((1, 4), 300.0)]).half()
    scaler = RunningStandardScaler(4)
    scaler.update(half)
    reference = RunningStandardScaler(4)
    reference.update(half.float())
    assert torch.isfinite(scaler.running_variance).all()
    assert torch.allclose(scaler.running_variance, reference.running_variance, rtol=1e-6)


def test_running_scaler_clips_and_checks_size():
    scaler = RunningStandardScaler(2, clip_threshold=1.0)
    assert scaler(torch.tensor([[10.0, -10.0]])).tolist() == [[1.0, -1.0]]
    try:
        scaler(torch.zeros(4, 3))
    except ValueError as error:
        assert "size 2" in str(error) and "(4, 3)" in str(error)
    else:
        raise AssertionError("no error for a wrong input size")


def test_kl_adaptive_lr_moves_the_rate_both_ways_within_bounds():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1e-3)
    scheduler = KLAdaptiveLR(optimizer, kl_threshold=0.01, min_lr=5e-4, max_lr=2e-3)
    scheduler.step(0.05)
    assert optimizer.param_groups[0]["lr"] == 1e-3 / 1.5
    scheduler.step(0.05)
    assert optimizer.param_groups[0]["lr"] == 5e-4  # floor
    scheduler.step(0.01)
    assert optimizer.param_groups[0]["lr"] == 5e-4  # inside the band: unchanged
    for _ in range(5):
        scheduler.step(0.001)
    assert optimizer.param_groups[0]["lr"] == 2e-3  # ceiling
    assert scheduler.get_last_lr() == [2e-3]


def _value_model(outputs=3, inputs=4):
    import gymnasium

    from marlparts.models import DeterministicMixin, Model, mlp

    class Value(DeterministicMixin, Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(8,))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    return Value(observation_space=gymnasium.spaces.Box(-1, 1, (inputs,)), output_size=outputs)


def test_popart_keeps_the_critic_s_values_in_return_units_when_its_statistics_move():
    from marlparts.resources import PopArt

    torch.manual_seed(0)
    model, popart = _value_model(outputs=3), PopArt(1)
    popart.preserve_outputs_of(model)
    inputs = {"observations": torch.randn(16, 4)}

    def values():
        return popart(model.compute(inputs)[0].reshape(-1, 1), inverse=True)

    before = values().detach()
    for shift in (50.0, -400.0):
        popart.update(torch.randn(256, 1) * 30 + shift)
        assert torch.allclose(values(), before, atol=1e-3 * before.abs().max())
    assert popart.running_mean.item() < -100  # the statistics did move
    plain = RunningStandardScaler(1)  # without preservation the same moves shift every value
    plain.update(torch.randn(256, 1) * 30 + 50.0)
    assert not torch.allclose(plain(model.compute(inputs)[0].reshape(-1, 1), inverse=True), values(), atol=1.0)


def test_popart_names_a_critic_whose_output_layer_it_cannot_find():
    import pytest

    from marlparts.resources import PopArt

    model = _value_model(outputs=3)
    model.net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())  # no linear layer gives the outputs last
    model.net[0] = torch.nn.Linear(4, 5)
    with pytest.raises(ValueError, match="no nn.Linear with 3 outputs"):
        PopArt(1).preserve_outputs_of(model)
    with pytest.raises(ValueError, match="size 2 cannot rescale"):
        PopArt(2).preserve_outputs_of(_value_model(outputs=3))


def test_popart_refuses_a_critic_whose_outputs_do_not_come_from_its_output_layer_alone():
    import pytest

    from marlparts.resources import PopArt

    squashed = _value_model(outputs=1)
    squashed.compute = lambda inputs, role="": (10 * torch.tanh(squashed.net(inputs["observations"])), {})
    shortcut = _value_model(outputs=1, inputs=1)
    shortcut.compute = lambda inputs, role="": (shortcut.net(inputs["observations"]) + inputs["observations"], {})
    for model in (squashed, shortcut):
        weight = model.net[-1].weight.detach().clone()
        with pytest.raises(ValueError, match="not that layer's outputs"):
            PopArt(1).preserve_outputs_of(model)
        assert torch.equal(model.net[-1].weight, weight)  # the check leaves the layer as it was

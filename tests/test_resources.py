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

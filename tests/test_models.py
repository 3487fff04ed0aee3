import gymnasium
import numpy as np
import pytest
import torch

from marlparts.models import CategoricalMixin, DeterministicMixin, GaussianMixin, Model, SquashedGaussianMixin, cnn, mlp

OBS = gymnasium.spaces.Box(-1, 1, (4,), np.float32)


class Policy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Gaussian(GaussianMixin, Model):
    clip_actions = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(3, 1)  # deliberately not the observation size when the space is bigger

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def test_categorical_masks_and_greedy_action():
    torch.manual_seed(0)
    policy = Policy(observation_space=OBS, action_space=gymnasium.spaces.Discrete(5))
    obs = torch.randn(256, 4)
    mask = torch.ones(256, 5, dtype=torch.bool)
    mask[:, 2] = False
    actions, log_prob, outputs = policy.act({"observations": obs, "action_mask": mask})
    assert actions.shape == (256, 1) and actions.dtype == torch.long and log_prob.shape == (256, 1)
    assert not (actions == 2).any()
    assert torch.equal(outputs["mean_actions"], outputs["logits"].argmax(-1, keepdim=True))
    assert not (outputs["mean_actions"] == 2).any()
    _, taken_log_prob, _ = policy.act({"observations": obs, "action_mask": mask, "taken_actions": actions})
    assert torch.allclose(taken_log_prob, log_prob)
    distribution = policy.distribution({"observations": obs, "action_mask": mask})
    assert torch.all(distribution.probs[:, 2] == 0)
    assert torch.allclose(distribution.log_prob(actions.squeeze(-1)).unsqueeze(-1), log_prob, atol=1e-6)
    assert torch.allclose(distribution.entropy().unsqueeze(-1), outputs["entropy"], atol=1e-6)


def test_gaussian_log_prob_clip_and_mean():
    torch.manual_seed(0)
    space = gymnasium.spaces.Box(-0.5, 0.5, (2,), np.float32)
    policy = Gaussian(observation_space=OBS, action_space=space)
    obs = torch.randn(64, 4)
    actions, log_prob, outputs = policy.act({"observations": obs})
    assert actions.shape == (64, 2) and actions.abs().max() <= 0.5
    mean = policy.compute({"observations": obs})[0]
    assert torch.equal(outputs["mean_actions"], mean.clamp(-0.5, 0.5))  # the greedy action stays in the Box
    # the log-probability is that of the unclipped sample, returned as "sampled_actions"
    sampled = outputs["sampled_actions"]
    assert torch.equal(actions, sampled.clamp(-0.5, 0.5)) and sampled.abs().max() > 0.5
    assert torch.allclose(log_prob, torch.distributions.Normal(mean, 1.0).log_prob(sampled).sum(-1, keepdim=True))
    expected = torch.distributions.Normal(mean, 1.0).log_prob(mean).sum(-1, keepdim=True)
    _, at_mean, _ = policy.act({"observations": obs, "taken_actions": mean})
    assert torch.allclose(at_mean, expected)


def test_input_size_mismatch_is_named():
    value = Value(observation_space=gymnasium.spaces.Box(-1, 1, (3,), np.float32))
    value.check_input_size(expected=3, what="value of agent_0")
    with pytest.raises(ValueError, match=r"agent_0.*built for 3 inputs.*fed 5"):
        value.check_input_size(expected=5, what="value of agent_0")
    wrong_layers = Value(observation_space=gymnasium.spaces.Box(-1, 1, (6,), np.float32))
    with pytest.raises(ValueError, match=r"agent_1.*layers do not match"):
        wrong_layers.check_input_size(expected=6, what="value of agent_1")


def test_polyak_update():
    source = Policy(observation_space=OBS, action_space=gymnasium.spaces.Discrete(2))
    target = Policy(observation_space=OBS, action_space=gymnasium.spaces.Discrete(2))
    before = [p.clone() for p in target.parameters()]
    target.update_parameters(source, polyak=0.25)
    for t, b, s in zip(target.parameters(), before, source.parameters()):
        assert torch.allclose(t, 0.75 * b + 0.25 * s)


def test_categorical_log_prob_and_entropy_match_torch_distribution_in_value_and_gradient():
    policy = Policy(observation_space=OBS, action_space=gymnasium.spaces.Discrete(5))
    torch.manual_seed(0)
    observations = torch.randn(300, 4)
    taken = torch.randint(0, 5, (300, 1))
    mask = torch.rand(300, 5) > 0.3
    mask[torch.arange(300), taken[:, 0]] = True  # the taken action is always allowed
    _, log_prob, outputs = policy.act({"observations": observations, "taken_actions": taken, "action_mask": mask})
    (log_prob.sum() + outputs["entropy"].sum()).backward()
    ours = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad()

    logits = policy.net(observations).masked_fill(~mask, torch.finfo(torch.float32).min)
    reference = torch.distributions.Categorical(logits=logits)
    expected_log_prob, expected_entropy = reference.log_prob(taken[:, 0]), reference.entropy()
    assert torch.allclose(log_prob[:, 0], expected_log_prob, atol=1e-6)
    assert torch.allclose(outputs["entropy"][:, 0], expected_entropy, atol=1e-6)
    (expected_log_prob.sum() + expected_entropy.sum()).backward()
    for mine, theirs in zip(ours, (p.grad for p in policy.parameters())):
        assert torch.allclose(mine, theirs, atol=1e-5)


class LogitsPolicy(CategoricalMixin, Model):
    """A categorical policy whose logits are its observations (to sample from chosen probabilities)."""

    def compute(self, inputs, role=""):
        return inputs["observations"], {}


def test_categorical_sampling_follows_the_probabilities_and_never_picks_a_forbidden_action():
    policy = LogitsPolicy(observation_space=gymnasium.spaces.Box(-1, 1, (4,)), action_space=gymnasium.spaces.Discrete(4))
    probs = torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.05, 0.0, 0.9, 0.05]]).repeat(30000, 1)
    mask = torch.tensor([[True, True, False, True], [True, True, True, True]]).repeat(30000, 1)
    expected = torch.tensor([[0.5, 0.3, 0.0, 0.1], [0.05, 0.0, 0.9, 0.05]])
    expected = expected / expected.sum(-1, keepdim=True)
    torch.manual_seed(0)
    actions, _, _ = policy.act({"observations": probs.log(), "action_mask": mask})
    assert actions.shape == (60000, 1) and actions.dtype == torch.long
    for row in range(2):
        frequencies = torch.bincount(actions[row::2].flatten(), minlength=4).float() / 30000
        tolerance = 4 * (expected[row] * (1 - expected[row]) / 30000).sqrt() + 1e-9
        assert torch.all((frequencies - expected[row]).abs() <= tolerance), (row, frequencies)
    assert not (actions[0::2] == 2).any() and not (actions[1::2] == 1).any()


def test_categorical_sampling_refuses_probabilities_that_are_not_finite():
    policy = LogitsPolicy(observation_space=gymnasium.spaces.Box(-1, 1, (3,)), action_space=gymnasium.spaces.Discrete(3))
    with pytest.raises(RuntimeError, match="nan"):
        policy.act({"observations": torch.tensor([[0.5, float("nan"), 0.5]])})


class ThreeLogits(CategoricalMixin, Model):
    """A categorical policy whose network has 3 outputs whatever its action space."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, 3)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def ppo_with_policy(policy, env, tmp_path, algorithm="mappo"):
    from helpers import build_mappo

    from marlparts.agents import IPPO, MAPPO
    from marlparts.memories import RandomMemory

    uids = env.possible_agents
    reference = build_mappo(env, directory=str(tmp_path), algorithm=algorithm)  # its critic
    models = {u: {"policy": policy, "value": reference.models[u]["value"]} for u in uids}
    kwargs = dict(possible_agents=uids, models=models, memories={u: RandomMemory(memory_size=4, num_envs=2) for u in uids},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  cfg={"rollouts": 4, "experiment": {"directory": str(tmp_path)}})
    if algorithm == "mappo":
        return MAPPO(state_spaces=env.state_spaces, **kwargs)
    return IPPO(**kwargs)


@pytest.mark.parametrize("algorithm", ["mappo", "ippo"])
def test_a_policy_with_fewer_logits_than_actions_is_refused_at_construction(tmp_path, algorithm):
    from toy_envs import CountingEnv

    from marlparts.envs import wrap_env

    env = wrap_env(lambda: CountingEnv(), num_envs=2, seed=0)  # Discrete(4) actions
    policy = ThreeLogits(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*one logit per action of its action space "
                                         r"Discrete\(4\).*returns \(3,\) values per sample, expected 4"):
        ppo_with_policy(policy, env, tmp_path, algorithm)


def test_a_policy_built_for_another_action_space_is_refused_at_construction(tmp_path):
    from toy_envs import CountingEnv

    from marlparts.envs import wrap_env

    env = wrap_env(lambda: CountingEnv(), num_envs=2, seed=0)
    policy = Policy(observation_space=env.observation_space("agent_0"), action_space=gymnasium.spaces.Discrete(3))
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*Discrete\(4\).*expected 4 \(it was built "
                                         r"for action_space=Discrete\(3\)\)"):
        ppo_with_policy(policy, env, tmp_path)


def test_a_gaussian_policy_with_a_mean_of_the_wrong_size_is_refused_at_construction(tmp_path):
    from toy_envs import ContinuousEnv

    from marlparts.envs import wrap_env

    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)  # Box(-1, 1, (2,)) actions
    policy = Gaussian(observation_space=env.observation_space("agent_0"),
                      action_space=gymnasium.spaces.Box(-1, 1, (3,), np.float32))
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*returns \(3,\) values per sample, expected 2"):
        ppo_with_policy(policy, env, tmp_path)


class Squashed(SquashedGaussianMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(8,))
        self.log_std = torch.nn.Parameter(torch.full((self.num_actions,), 0.5))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def test_squashed_gaussian_log_prob_of_sampled_and_of_taken_actions_is_torch_s_transformed_normal():
    """The log-probability of a squashed sample, and of the stored pre-squash sample given back as
    ``taken_actions`` (as PPO does at its update), equal torch's tanh-then-affine transformed Normal.
    """
    from torch.distributions import AffineTransform, Normal, TanhTransform

    torch.manual_seed(0)
    space = gymnasium.spaces.Box(low=np.array([-1.0, 0.0], dtype=np.float32), high=np.array([3.0, 0.5], dtype=np.float32))
    model = Squashed(observation_space=gymnasium.spaces.Box(-1, 1, (3,)), action_space=space)
    inputs = {"observations": torch.randn(64, 3)}
    actions, log_prob, outputs = model.act(inputs)
    sample = outputs["sampled_actions"]
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    mean = model.net(inputs["observations"])
    # torch's transforms on the known pre-squash sample (inverting tanh of a saturated action would lose it)
    tanh, affine = TanhTransform(), AffineTransform(low + (high - low) / 2, (high - low) / 2)
    squashed = torch.tanh(sample)
    expected = (Normal(mean, model.log_std.exp().expand_as(mean)).log_prob(sample)
                - tanh.log_abs_det_jacobian(sample, squashed)
                - affine.log_abs_det_jacobian(squashed, affine(squashed))).sum(-1, keepdim=True)
    assert torch.allclose(actions, low + (torch.tanh(sample) + 1) * (high - low) / 2)
    assert ((actions >= low) & (actions <= high)).all()
    assert torch.allclose(log_prob, expected, atol=1e-4)
    again, taken_log_prob, taken_outputs = model.act({**inputs, "taken_actions": sample})
    assert torch.allclose(taken_log_prob, log_prob, atol=1e-6)
    assert torch.allclose(again, actions)
    # the entropy the PPO loss reads carries gradients to the mean and the std
    taken_outputs["entropy"].sum().backward()
    assert model.log_std.grad.abs().sum() > 0 and model.net[0].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("space, wrong", [
    (gymnasium.spaces.Box(np.array([-1.0, 0.5], np.float32), np.array([1.0, 0.5], np.float32)),
     r"component 1.*low 0\.5.*high 0\.5"),
    (gymnasium.spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, 1.0], np.float32)), r"component 1.*low -inf"),
    (gymnasium.spaces.Discrete(3), r"Discrete\(3\)"),
])
def test_a_squashed_gaussian_refuses_an_action_space_it_cannot_squash_into(space, wrong):
    """tanh squashes into a Box with finite bounds and some width in every component: a zero-width component made
    every log-probability infinite (and the parameters NaN after one update), an infinite bound made the actions
    NaN. Such a space is refused when the model is built, naming the component."""
    with pytest.raises(ValueError, match=r"Squashed.*" + wrong):
        Squashed(observation_space=gymnasium.spaces.Box(-1, 1, (3,)), action_space=space)


def test_cnn_reads_flat_channels_last_rows_as_the_env_s_images():
    """A row of a flattened (height, width, channels) image reaches the first convolution as (channels, height,
    width); bytes scaled by 1/255 give what the same pixels as floats give; the Nature encoder's output size."""
    torch.manual_seed(0)
    images = torch.randint(0, 256, (5, 84, 84, 4), dtype=torch.uint8)
    network = cnn((84, 84, 4), 6, input_scale=1 / 255)
    first = network[0](images.flatten(1))
    assert first.shape == (5, 4, 84, 84) and first.dtype == torch.float32
    assert torch.equal(first[2, 3, 10, 20], images[2, 10, 20, 3].float() / 255)
    assert torch.allclose(network(images.flatten(1)), network(images.flatten(1).float()), atol=1e-6)
    assert network(images.flatten(1)).shape == (5, 6)
    conv = [layer for layer in network if isinstance(layer, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in conv] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
    channels_first = cnn((4, 84, 84), 6, channels_last=False)
    assert channels_first[0](images.permute(0, 3, 1, 2).flatten(1)).shape == (5, 4, 84, 84)
    assert network.double()(images.flatten(1)).dtype == torch.float64  # the images follow the network's dtype


def test_cnn_centres_each_image_on_its_own_mean_so_brightness_does_not_reach_the_filters():
    """With ``subtract_image_mean`` every channel of every image reaches the first convolution with mean zero, and
    an image and the same image made brighter by a constant (a lighter background) give the same outputs; the
    differences between pixels are kept."""
    torch.manual_seed(0)
    images = torch.randint(0, 200, (3, 12, 12, 2), dtype=torch.uint8)
    network = cnn((12, 12, 2), 4, channels=(8,), kernel_sizes=(3,), strides=(1,), hidden_sizes=(),
                  input_scale=1 / 255, subtract_image_mean=True)
    first = network[0](images.flatten(1))
    assert first.mean(dim=(2, 3)).abs().max() < 1e-6
    scaled = images.permute(0, 3, 1, 2).float() / 255
    assert torch.allclose(first[1, 0, 4] - first[1, 0, 7], scaled[1, 0, 4] - scaled[1, 0, 7], atol=1e-6)
    assert torch.allclose(network(images.flatten(1)), network((images + 50).flatten(1)), atol=1e-5)
    plain = cnn((12, 12, 2), 4, channels=(8,), kernel_sizes=(3,), strides=(1,), hidden_sizes=(), input_scale=1 / 255)
    plain.load_state_dict(network.state_dict(), strict=False)  # the same weights, without centring
    assert not torch.allclose(plain(images.flatten(1)), plain((images + 50).flatten(1)), atol=1e-3)


def test_a_cnn_refuses_the_weights_of_one_that_centred_its_images_differently():
    """The same weights read images otherwise with and without ``subtract_image_mean``: a checkpoint of one must not
    load silently into the other (it did, as the setting was no part of the saved state)."""
    def network(centre):
        return cnn((12, 12, 2), 4, channels=(8,), kernel_sizes=(3,), strides=(1,), hidden_sizes=(),
                   subtract_image_mean=centre)
    with pytest.raises(RuntimeError, match="centred_on_image_mean"):
        network(True).load_state_dict(network(False).state_dict())
    with pytest.raises(RuntimeError, match="centred_on_image_mean"):
        network(False).load_state_dict(network(True).state_dict())
    network(True).load_state_dict(network(True).state_dict())
    network(False).load_state_dict(network(False).state_dict())


def test_cnn_names_an_image_too_small_for_its_kernels_and_a_wrong_input():
    with pytest.raises(ValueError, match=r"convolution 0 \(8x8, stride 4\).*7x7"):
        cnn((7, 7, 3), 5)
    small = cnn((7, 7, 3), 5, channels=(16, 16), kernel_sizes=(3, 3), strides=(1, 1), hidden_sizes=(32,))
    assert small(torch.zeros(2, 147)).shape == (2, 5)
    with pytest.raises(ValueError, match=r"images of shape \(7, 7, 3\).*\(2, 100\)"):
        small(torch.zeros(2, 100))
    with pytest.raises(ValueError, match="3 dimensions"):
        cnn((49, 3), 5)


def test_popart_rescales_the_last_layer_of_a_cnn_critic():
    from marlparts.resources import PopArt

    class Critic(DeterministicMixin, Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = cnn((7, 7, 3), 1, channels=(8,), kernel_sizes=(3,), strides=(1,), hidden_sizes=(16,))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    torch.manual_seed(0)
    critic = Critic(observation_space=gymnasium.spaces.Box(0, 1, (7, 7, 3)))
    normaliser = PopArt(1)
    normaliser.preserve_outputs_of(critic)
    inputs = {"observations": torch.rand(4, 147)}
    before = normaliser(critic.compute(inputs)[0], inverse=True)
    normaliser.update(torch.randn(64, 1) * 30 + 5)
    assert torch.allclose(normaliser(critic.compute(inputs)[0], inverse=True), before, atol=1e-4)


def test_squashed_gaussian_actions_stay_inside_an_asymmetric_box_when_tanh_saturates():
    """With tanh(u) rounding to exactly ±1, low + (tanh(u) + 1) (high - low) / 2 can land one float32 step outside
    an asymmetric Box, which the batched env wrappers refuse; sampled and greedy actions must stay inside."""

    class Saturated(SquashedGaussianMixin, Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role=""):
            return torch.tensor([[20.0], [-20.0]]).repeat(inputs["observations"].shape[0] // 2, 1), {}

    space = gymnasium.spaces.Box(low=np.float32(-2.3046653), high=np.float32(2.4782), shape=(1,), dtype=np.float32)
    policy = Saturated(observation_space=gymnasium.spaces.Box(-1, 1, (2,)), action_space=space)
    actions, _, outputs = policy.act({"observations": torch.zeros(64, 2)})
    for chosen in (actions, outputs["mean_actions"]):
        assert all(space.contains(row.detach().numpy()) for row in chosen)


@pytest.fixture
def tanh_kernel_restored():
    """Put back the process's tanh kernel after a test that sets one."""
    from marlparts.models import activations

    chosen = activations._chosen_kernel
    yield activations
    activations._chosen_kernel = chosen


@pytest.mark.parametrize("kernel", ["torch", "sigmoid"])
def test_the_default_tanh_matches_torch_tanh_in_value_first_and_second_derivative(kernel, tanh_kernel_restored):
    from marlparts.models import Tanh, choose_tanh_kernel, tanh
    from marlparts.models.activations import SIGMOID_TANH_MIN_ELEMENTS, _TanhFromSigmoid

    activations = tanh_kernel_restored
    assert choose_tanh_kernel(kernel) == kernel
    large = torch.randn(SIGMOID_TANH_MIN_ELEMENTS, requires_grad=True)
    backward = type(tanh(large).grad_fn).__name__
    assert ("TanhBackward" in backward) == (kernel == "torch") and ("TanhFromSigmoid" in backward) == (kernel == "sigmoid")
    with torch.no_grad():  # acting: the chosen kernel too, bit for bit (the two differ in the last bits)
        assert torch.equal(tanh(large), torch.tanh(large)) == (kernel == "torch")
        assert torch.equal(tanh(large), activations._tanh_from_sigmoid_without_gradient(large)) == (kernel == "sigmoid")
    x = torch.cat([torch.linspace(-30, 30, SIGMOID_TANH_MIN_ELEMENTS),
                   torch.tensor([0.0, -0.0, 1e-30, float("inf"), -float("inf")])])
    assert torch.allclose(tanh(x), torch.tanh(x), rtol=0, atol=3e-7)
    assert torch.equal(tanh(x[:100]), torch.tanh(x[:100]))  # small tensors: torch.tanh itself
    nan = torch.full((SIGMOID_TANH_MIN_ELEMENTS,), float("nan"))
    assert tanh(nan).isnan().all() and tanh(nan.requires_grad_()).isnan().all()
    assert isinstance(mlp(3, 2)[1], Tanh)  # mlp's hidden layers use it
    doubles = torch.randn(SIGMOID_TANH_MIN_ELEMENTS, dtype=torch.float64, requires_grad=True)
    ours, theirs = tanh(doubles), torch.tanh(doubles)
    assert ours.grad_fn is not None and torch.allclose(ours, theirs, rtol=0, atol=1e-15)
    upstream = torch.randn(SIGMOID_TANH_MIN_ELEMENTS, dtype=torch.float64)
    (first,) = torch.autograd.grad(ours, doubles, upstream, create_graph=True)
    (expected_first,) = torch.autograd.grad(theirs, doubles, upstream, create_graph=True)
    assert torch.allclose(first, expected_first, rtol=1e-12, atol=1e-14)
    (second,) = torch.autograd.grad(first.sum(), doubles)
    (expected_second,) = torch.autograd.grad(expected_first.sum(), doubles)
    assert torch.allclose(second, expected_second, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradgradcheck(_TanhFromSigmoid.apply, (torch.randn(8, dtype=torch.float64, requires_grad=True),))
    with torch.no_grad():
        assert torch.allclose(tanh(doubles), theirs, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kernel", ["torch", "sigmoid"])
def test_the_default_tanh_keeps_half_precision_and_works_under_vmap_and_forward_mode_ad(kernel, tanh_kernel_restored):
    from marlparts.models import choose_tanh_kernel, tanh
    from marlparts.models.activations import SIGMOID_TANH_MIN_ELEMENTS

    choose_tanh_kernel(kernel)
    small = torch.linspace(-0.02, 0.02, SIGMOID_TANH_MIN_ELEMENTS)
    for dtype in (torch.bfloat16, torch.float16):  # 2σ(2x) − 1 would round small values to 0 in half precision
        assert torch.equal(tanh(small.to(dtype)), torch.tanh(small.to(dtype)))
    batch = torch.randn(2, SIGMOID_TANH_MIN_ELEMENTS)
    assert torch.allclose(torch.func.vmap(tanh)(batch), torch.tanh(batch), rtol=0, atol=3e-7)
    tangent = torch.randn(SIGMOID_TANH_MIN_ELEMENTS)
    value, derivative = torch.func.jvp(tanh, (batch[0],), (tangent,))
    assert torch.allclose(value, torch.tanh(batch[0]), rtol=0, atol=3e-7)
    assert torch.allclose(derivative, tangent * (1 - torch.tanh(batch[0]) ** 2), rtol=1e-5, atol=1e-6)
    with torch.enable_grad():
        inputs = batch.clone().requires_grad_()
        gradient = torch.func.vmap(torch.func.grad(lambda row: tanh(row).sum()))(inputs)
    assert torch.allclose(gradient, 1 - torch.tanh(batch) ** 2, rtol=1e-5, atol=1e-6)


def test_the_sigmoid_form_of_tanh_is_chosen_only_where_it_is_clearly_faster():
    from marlparts.models.activations import faster_tanh_kernel

    assert faster_tanh_kernel(torch_seconds=4.3, sigmoid_seconds=1.5) == "sigmoid"  # a machine with a slow tanh
    assert faster_tanh_kernel(torch_seconds=0.53, sigmoid_seconds=1.77) == "torch"  # one with a fast tanh
    assert faster_tanh_kernel(torch_seconds=1.0, sigmoid_seconds=0.9) == "torch"  # close: the exact kernel stays


def test_the_tanh_kernel_is_torch_tanh_unless_named_and_auto_times_both_once(tanh_kernel_restored, monkeypatch):
    from marlparts.models import choose_tanh_kernel, tanh_kernel

    activations = tanh_kernel_restored
    timings = []
    monkeypatch.setattr(activations, "_time_tanh_kernels", lambda: timings.append(1) or (4.3e-3, 1.5e-3))
    activations._chosen_kernel = None
    monkeypatch.delenv("MARLPARTS_TANH_KERNEL", raising=False)
    assert tanh_kernel() == "torch" and not timings  # the default: exact, nothing timed
    activations._chosen_kernel = None
    monkeypatch.setenv("MARLPARTS_TANH_KERNEL", "sigmoid")
    assert tanh_kernel() == "sigmoid" and not timings
    activations._chosen_kernel = None
    monkeypatch.setenv("MARLPARTS_TANH_KERNEL", "auto")
    assert tanh_kernel() == "sigmoid" and tanh_kernel() == "sigmoid" and timings == [1]  # timed once, kept
    assert choose_tanh_kernel("torch") == "torch" and tanh_kernel() == "torch"
    activations._chosen_kernel = None
    monkeypatch.setenv("MARLPARTS_TANH_KERNEL", "fastest")
    with pytest.raises(ValueError, match="MARLPARTS_TANH_KERNEL must be one of .*'fastest'"):
        tanh_kernel()
    with pytest.raises(ValueError, match="tanh kernel must be one of .*'tanh'"):
        choose_tanh_kernel("tanh")
    monkeypatch.undo()
    assert choose_tanh_kernel("auto") in ("torch", "sigmoid")  # the real timing runs and picks one

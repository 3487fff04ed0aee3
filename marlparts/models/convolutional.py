"""Convolutional networks for image observations: :func:`cnn`, beside :func:`~marlparts.models.mlp`.

The algorithms hand a model its observations flattened, one row per agent and copy
(``(batch, height * width * channels)``, in the order of the env's observation space). A network
built by :func:`cnn` starts with :class:`ImageInput`, which gives each row its image shape back,
moves the channels first when the env's images are channels-last (PettingZoo's and Gymnasium's
are), and converts the values to floats scaled by ``input_scale`` (``1 / 255`` for pixels held as
bytes), optionally centred on each image's own mean (``subtract_image_mean``); convolutions, a
flattening and fully connected layers follow.
"""

import math
from typing import Sequence, Tuple, Type

import torch
from torch import nn

from marlparts.models.base import mlp

NATURE_CHANNELS = (32, 64, 64)
NATURE_KERNEL_SIZES = (8, 4, 3)
NATURE_STRIDES = (4, 2, 1)


class ImageInput(nn.Module):
    """Rows of flattened images (or images) ``(batch, ...)`` as float images ``(batch, channels, height, width)``, in
    the floating dtype of the network it leads (float32 unless the network was converted).

    Args:
        image_shape: the shape of one observation as the env gives it: ``(height, width, channels)`` when
            ``channels_last``, else ``(channels, height, width)``.
        channels_last: whether the env's images have their channels last.
        input_scale: every value is multiplied by it (``1 / 255`` for pixels in ``[0, 255]``).
        subtract_image_mean: after scaling, subtract from each channel of each image its mean over the
            pixels, so a flat background reads as zero whatever its brightness. For bright images (a white
            background): there every filter of the first convolution sums the same near-constant value, so its
            weights act together as a bias that Adam moves about as many times as fast as the bias itself as
            the filter has weights, and the filter's ReLU can go dark for every image within the first updates.
            Each channel's own level is dropped (two images of one uniform colour each read the same). A network
            that centres holds a one-value buffer ``centred_on_image_mean``, so a checkpoint of a network that did
            not centre refuses to load into one that does, and the other way round, rather than load and read its
            images otherwise.
    """

    def __init__(self, image_shape: Sequence[int], *, channels_last: bool = True, input_scale: float = 1.0,
                 subtract_image_mean: bool = False) -> None:
        super().__init__()
        if len(image_shape) != 3:
            layout = "height, width, channels" if channels_last else "channels, height, width"
            raise ValueError(f"cnn takes images of 3 dimensions ({layout}), got an observation of shape "
                             f"{tuple(image_shape)}")
        self.image_shape = tuple(int(size) for size in image_shape)
        self.channels_last = channels_last
        self.input_scale = input_scale
        self.subtract_image_mean = subtract_image_mean
        if subtract_image_mean:  # saved with the parameters: a checkpoint tells whether its network centred
            self.register_buffer("centred_on_image_mean", torch.ones(()))
        # an empty buffer follows the network's .double() / .half() / .to(dtype): the images take its dtype
        self.register_buffer("dtype_anchor", torch.empty(0), persistent=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """``(batch, prod(image_shape))`` or ``(batch, *image_shape)`` to ``(batch, channels, height, width)`` floats."""
        size = math.prod(self.image_shape)
        if inputs.shape[-1] != size and tuple(inputs.shape[1:]) != self.image_shape:
            raise ValueError(f"cnn built for images of shape {self.image_shape} ({size} values a row) got input of shape "
                             f"{tuple(inputs.shape)}")
        images = inputs.reshape(-1, *self.image_shape)
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)
        images = images.to(self.dtype_anchor.dtype)
        if self.input_scale != 1.0:
            images = images * self.input_scale
        if self.subtract_image_mean:
            images = images - images.mean(dim=(2, 3), keepdim=True)
        return images

    def extra_repr(self) -> str:
        """The settings shown when the network is printed."""
        return (f"image_shape={self.image_shape}, channels_last={self.channels_last}, input_scale={self.input_scale}, "
                f"subtract_image_mean={self.subtract_image_mean}")


def _orthogonal(layer: nn.Conv2d) -> nn.Conv2d:
    """``layer`` with orthogonal weights of gain √2 and zero biases, as :func:`mlp` initialises its hidden layers."""
    nn.init.orthogonal_(layer.weight, gain=2**0.5)
    nn.init.zeros_(layer.bias)
    return layer


def convolved_size(image_size: Tuple[int, int], kernel_size: int, stride: int) -> Tuple[int, int]:
    """The ``(height, width)`` a convolution without padding leaves of an ``image_size`` image."""
    return tuple((size - kernel_size) // stride + 1 for size in image_size)


def cnn(image_shape: Sequence[int], output_size: int, *, channels: Sequence[int] = NATURE_CHANNELS,
        kernel_sizes: Sequence[int] = NATURE_KERNEL_SIZES, strides: Sequence[int] = NATURE_STRIDES,
        hidden_sizes: Sequence[int] = (512,), activation: Type[nn.Module] = nn.ReLU, output_gain: float = 1.0,
        channels_last: bool = True, input_scale: float = 1.0, subtract_image_mean: bool = False) -> nn.Sequential:
    """A convolutional network from images to ``output_size`` outputs, by default the Nature-DQN encoder
    (Mnih et al., 2015: 32 8x8 filters at stride 4, 64 4x4 at stride 2, 64 3x3 at stride 1, then 512 units),
    with orthogonal initialisation (gain √2, ``output_gain`` for the last layer) as :func:`mlp` has.

    The Nature encoder suits images of 84x84 or so; small image-like views (SISL pursuit's 7x7) take
    smaller kernels, e.g. ``kernel_sizes=(3, 3), strides=(1, 1), channels=(32, 32)``.

    Args:
        image_shape: the shape of one observation: ``(height, width, channels)`` when ``channels_last``
            (PettingZoo's images), else ``(channels, height, width)``.
        output_size: number of outputs (logits, a Gaussian's mean, values).
        channels: output channels of each convolution (no padding).
        kernel_sizes: kernel size of each convolution.
        strides: stride of each convolution.
        hidden_sizes: fully connected layers after the convolutions (an :func:`mlp`, the network's last module).
        activation: placed after every convolution and hidden layer.
        output_gain: gain of the last layer (small, e.g. 0.01, for policy logits).
        channels_last: whether the env's images have their channels last.
        input_scale: every input value is multiplied by it first (``1 / 255`` for pixels as bytes).
        subtract_image_mean: centre each channel of each image on its mean over the pixels (after the scaling);
            for bright images, whose first-layer filters otherwise go dark (see :class:`ImageInput`).

    Raises:
        ValueError: the image is not 3-dimensional, the per-layer lists differ in length, or the image is
            too small for the convolutions (naming the layer and the sizes).
    """
    if not len(channels) == len(kernel_sizes) == len(strides):
        raise ValueError(f"cnn needs one kernel size and one stride per convolution: channels {tuple(channels)}, "
                         f"kernel_sizes {tuple(kernel_sizes)}, strides {tuple(strides)}")
    image = ImageInput(image_shape, channels_last=channels_last, input_scale=input_scale,
                       subtract_image_mean=subtract_image_mean)
    in_channels, *size = (image.image_shape[2], *image.image_shape[:2]) if channels_last else image.image_shape
    layers = [image]
    for index, (out_channels, kernel_size, stride) in enumerate(zip(channels, kernel_sizes, strides)):
        next_size = convolved_size(tuple(size), kernel_size, stride)
        if min(next_size) < 1:
            raise ValueError(f"cnn: convolution {index} ({kernel_size}x{kernel_size}, stride {stride}) does not fit an image "
                             f"of {size[0]}x{size[1]} (observation shape {image.image_shape}): pass smaller "
                             "kernel_sizes or strides")
        layers += [_orthogonal(nn.Conv2d(in_channels, out_channels, kernel_size, stride)), activation()]
        in_channels, size = out_channels, next_size
    layers += [nn.Flatten(), mlp(in_channels * size[0] * size[1], output_size, hidden_sizes=hidden_sizes,
                                 activation=activation, output_gain=output_gain)]
    return nn.Sequential(*layers)

"""Writing recorded frames as video files (MP4 or GIF) with imageio, an optional dependency."""

import os
from typing import Any

import numpy as np

VIDEO_EXTENSIONS = (".mp4", ".gif")


def _imageio() -> Any:
    try:
        import imageio.v3 as iio
    except ImportError as error:
        raise ImportError("recording videos needs imageio (and imageio-ffmpeg for MP4): "
                          "pip install 'marlparts[video]'") from error
    return iio


def as_frames(frames: Any) -> np.ndarray:
    """Frames as one ``(time, height, width, 3)`` uint8 array; a clear error for anything else."""
    array = np.asarray(frames)
    if array.ndim != 4 or array.shape[-1] not in (3, 4) or array.shape[0] == 0:
        raise ValueError(f"expected RGB frames of shape (time, height, width, 3), got shape {array.shape}")
    return np.ascontiguousarray(array[..., :3]).astype(np.uint8, copy=False)


def save_video(frames: Any, path: str, fps: float = 30.0) -> str:
    """Write ``frames`` to ``path`` (``.mp4`` through ffmpeg, or ``.gif``) and return the path."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in VIDEO_EXTENSIONS:
        raise ValueError(f"video file {path!r} must end in one of {VIDEO_EXTENSIONS}")
    frames = as_frames(frames)
    iio = _imageio()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if extension == ".gif":
        iio.imwrite(path, frames, extension=".gif", duration=1000.0 / fps, loop=0)
    else:  # even sizes for the H.264 encoder
        height, width = frames.shape[1] - frames.shape[1] % 2, frames.shape[2] - frames.shape[2] % 2
        iio.imwrite(path, frames[:, :height, :width], extension=".mp4", fps=fps, codec="libx264", macro_block_size=1)
    return path


def encode_gif(frames: Any, fps: float = 30.0) -> bytes:
    """``frames`` as the bytes of an animated GIF."""
    return _imageio().imwrite("<bytes>", as_frames(frames), extension=".gif", duration=1000.0 / fps, loop=0)


def count_frames(path: str) -> int:
    """Number of frames in the video file at ``path``."""
    return sum(1 for _ in _imageio().imiter(path))

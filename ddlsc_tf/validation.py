"""Checks at the library's boundaries, before any training starts.

Each error names the offending value and what was expected, so a bad input
fails in a line instead of deep inside TensorFlow.
"""

import numpy as np


# How to give images the channels a model takes.
_CONVERT = {1: "gray: weigh the colour channels as the library's own files, "
               "X[..., :3] @ [0.299, 0.587, 0.114]",
            3: "RGB: repeat the gray channel, "
               "np.repeat(X.reshape(*X.shape[:3], 1), 3, axis=-1)"}


def check_images(images, *, expected_shape=None, name="images"):
  """Validates a batch of images and returns it as float32 in [0, 1].

  Args:
    images: array-like [N, H, W] or [N, H, W, C]; uint8 in 0-255 or float
      in [0, 1].
    expected_shape: optional (H, W, C) the images must have (a trained
      network's input).
    name: what to call the input in errors.

  Returns:
    [N, H, W, C] float32 in [0, 1].

  Raises:
    TypeError: not numeric.
    ValueError: empty, wrong rank or shape, NaN/inf, or out of range.
  """
  try:
    array = np.asarray(images)
  except ValueError as e:  # a ragged list: NumPy's message does not name it
    raise ValueError(
        f"{name} is not one rectangular array (images of different sizes, "
        f"or lists of different lengths?): {e}") from None
  if (not (np.issubdtype(array.dtype, np.number) or array.dtype == bool)
      or np.issubdtype(array.dtype, np.complexfloating)):
    raise TypeError(f"{name} must be real numbers, got dtype {array.dtype}.")
  if array.ndim == 3:
    array = array[..., np.newaxis]
  if array.ndim != 4:
    raise ValueError(
        f"{name} must be [N, H, W] or [N, H, W, C], got shape "
        f"{np.shape(images)}.")
  if array.shape[0] == 0:
    raise ValueError(f"{name} is empty (shape {array.shape}): nothing to "
                     f"cluster.")
  if min(array.shape[1:]) == 0:
    raise ValueError(f"{name} has an empty image dimension: shape "
                     f"{array.shape}.")
  if array.shape[-1] not in (1, 2, 3, 4):
    raise ValueError(
        f"{name} have {array.shape[-1]} channels per image; images have 1 "
        f"(gray) or 3 (RGB), each with an optional alpha channel.")
  # As the model sees them: an alpha channel is composited away below.
  shape = (*array.shape[1:3], {2: 1, 4: 3}.get(array.shape[3],
                                              array.shape[3]))
  if expected_shape is not None and shape != tuple(expected_shape):
    if shape[:2] == tuple(expected_shape[:2]):
      raise ValueError(
          f"{name} have {shape[2]} colour channel(s) per image, but the "
          f"model takes {expected_shape[2]} (shape {tuple(expected_shape)});"
          f" convert them first ({_CONVERT[expected_shape[2]]}).")
    raise ValueError(
        f"{name} have shape {shape} per image, but the model takes "
        f"{tuple(expected_shape)}; resize them first.")
  if array.dtype == np.uint8:
    return composite_alpha(array.astype(np.float32) / 255.0)
  dtype = array.dtype
  if np.issubdtype(dtype, np.floating):  # in its own dtype: 1e300 is finite
    finite = np.isfinite(array)
    if not finite.all():
      bad = np.argwhere(~finite)[0]
      raise ValueError(
          f"{name} hold {int((~finite).sum())} NaN or inf values (first at "
          f"index {tuple(int(i) for i in bad)}: {array[tuple(bad)]}).")
  low, high = float(array.min()), float(array.max())
  if low < 0.0 or high > 1.0:
    fix = ("pass 0-255 pixels as uint8 (X.astype(np.uint8)), or rescale "
           "to [0, 1]" if np.issubdtype(dtype, np.integer) else
           "divide by 255 (or rescale) first")
    raise ValueError(
        f"{name} must be uint8 in 0-255 or float in [0, 1], got {dtype} "
        f"values in [{low:g}, {high:g}]; {fix}.")
  return composite_alpha(array.astype(np.float32, copy=False))


def composite_alpha(images):
  """Gray+alpha or RGB+alpha images as gray or RGB, the same rule for
  arrays and files: each image is composited over the background that
  contrasts with its opaque pixels, black when they are light (mean >=
  0.5), white when they are dark, so a light drawing on a transparent
  background and a dark one drawn in alpha both keep their strokes.
  Images without transparency keep their colours.

  Args:
    images: [N, H, W, C] or [H, W, C] float in [0, 1], C in 1-4.

  Returns:
    The same with C in (1, 3): 2 and 4 channels lose their alpha.
  """
  images = np.asarray(images, np.float32)
  if images.shape[-1] not in (2, 4):
    return images
  single = images.ndim == 3
  batch = images[np.newaxis] if single else images
  colour, alpha = batch[..., :-1], batch[..., -1:]
  axes = tuple(range(1, batch.ndim))
  covered = np.maximum(alpha.sum(axis=axes), 1e-12)
  opaque_mean = (colour.mean(axis=-1, keepdims=True) * alpha).sum(
      axis=axes) / covered
  background = np.where(opaque_mean >= 0.5, 0.0, 1.0).astype(np.float32)
  background = background.reshape((-1,) + (1,) * (batch.ndim - 1))
  out = colour * alpha + background * (1.0 - alpha)
  return out[0] if single else out


def check_labels(labels, num_examples, *, name="labels"):
  """None, or [N] integer labels (used for scores only). A negative label
  marks an unlabelled image, left out of the scores; all negative: None."""
  if labels is None:
    return None
  labels = np.asarray(labels)
  if labels.shape != (num_examples,):
    raise ValueError(f"{name} must have shape ({num_examples},) to match "
                     f"the images, got {labels.shape}.")
  if not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"{name} must be integers, got dtype {labels.dtype}.")
  if labels.size and labels.max() < 0:
    return None  # every image unlabelled: nothing to score
  return labels.astype(np.int64)

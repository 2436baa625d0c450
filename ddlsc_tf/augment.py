"""Random affine copies of a batch, in-graph (ours: the paper has none).

Training can add, for every image of a batch, a copy under a small random
rotation, scaling, shear and shift, and make each (image, copy) pair an
anchor of eq. 5 (`anchors.with_copy_anchors`). The pair is the one anchor
known to share a cluster without labels, and pulling it together teaches
the encoder to ignore the pose and slant that otherwise split a digit
class along a style axis.
"""

import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from ddlsc_tf import losses


class Affine(NamedTuple):
  """Largest random change per image; each is drawn uniformly in ±value."""
  rotation: float     # degrees
  scale: float        # relative: 0.1 draws scales in [0.9, 1.1]
  shear: float        # x-shift per unit of y (a slant)
  translation: float  # pixels, x and y drawn independently

  @classmethod
  def parse(cls, values):
    """An Affine from 4 numbers (a config's `augment`); () gives None."""
    values = tuple(float(v) for v in values)
    if not values:
      return None
    if len(values) != 4 or any(not math.isfinite(v) or v < 0
                               for v in values):
      raise ValueError(
          f"augment must be empty (off) or 4 finite numbers >= 0: rotation "
          f"in degrees, scale, shear, translation in pixels; got "
          f"{list(values)}.")
    return cls(*values)


def resample(x, transforms):
  """Each image of x read through its own affine map, bilinear, zero fill.

  Args:
    x: [B, H, W, C] float images.
    transforms: [B, 8] float, per image (a0, a1, a2, b0, b1, b2, 0, 0):
      output pixel (x, y) reads the input at (a0 x + a1 y + a2,
      b0 x + b1 y + b2), pixel indices.

  Returns:
    [B, H, W, C], x's dtype.
  """
  shape = tf.shape(x)
  return tf.raw_ops.ImageProjectiveTransformV3(
      images=x, transforms=tf.cast(transforms, tf.float32),
      output_shape=shape[1:3], fill_value=tf.constant(0.0, x.dtype),
      interpolation="BILINEAR", fill_mode="CONSTANT")


def random_affine(x, *, affine, seed, first=0, total=None):
  """Each image of x under its own random affine map (bilinear, zero fill).

  Args:
    x: [B, H, W, C] float images.
    affine: an `Affine`, the largest change per image.
    seed: [2] int, the stateless seed; one seed gives one set of maps.
    first, total: x is rows [first, first + B) of a batch of `total`
      images (None: B) whose maps this seed draws, so that a replica's
      slice of a global batch gets the maps the whole batch would.

  Returns:
    [B, H, W, C] float. A zero `Affine` returns x unchanged.
  """
  shape = tf.shape(x)
  b, h, w = shape[0], shape[1], shape[2]
  u = tf.random.stateless_uniform([b if total is None else total, 5],
                                  seed=seed, minval=-1.0, maxval=1.0,
                                  dtype=x.dtype)
  if total is not None:
    u = u[first:first + b]
  angle = u[:, 0] * (affine.rotation * math.pi / 180.0)
  scale = 1.0 + u[:, 1] * affine.scale
  shear = u[:, 2] * affine.shear
  tx, ty = u[:, 3] * affine.translation, u[:, 4] * affine.translation
  # The op maps each output pixel (x, y) to the input point
  # M (x - c) + c + t, with M = rotation · shear / scale.
  cos, sin = tf.cos(angle) / scale, tf.sin(angle) / scale
  m00, m01 = cos, shear * cos - sin
  m10, m11 = sin, shear * sin + cos
  cx = (tf.cast(w, x.dtype) - 1.0) / 2.0
  cy = (tf.cast(h, x.dtype) - 1.0) / 2.0
  zeros = tf.zeros_like(angle)
  transforms = tf.stack(
      [m00, m01, cx - m00 * cx - m01 * cy + tx,
       m10, m11, cy - m10 * cx - m11 * cy + ty, zeros, zeros], axis=1)
  return resample(x, transforms)


def copies_mean(encoder, affine, copies):
  """fn(x, seed, offset) → [B, d]: the mean of the unit latent of each image
  of x and of `copies` random affine copies of it, in inference mode.

  Copy c of the batch that starts at image `offset` (int32, a tensor so one
  trace serves every batch) uses the stateless seed
  fold_in(fold_in(seed, c), offset): every call draws the same copies. One
  graph per (encoder, copies). Each copy waits for the sum so far: left to
  run side by side in the graph, the copies' encoder passes gave sums that
  differed from call to call in the last bit, which can move a k-means
  assignment and break "same seed, same result.json".
  """
  @tf.function(reduce_retracing=True)
  def mean(x, seed, offset):
    total = losses.normalize_rows(encoder(x, training=False))
    for c in range(copies):
      copy_seed = tf.random.experimental.stateless_fold_in(
          tf.random.experimental.stateless_fold_in(seed, c), offset)
      with tf.control_dependencies([total]):
        copy = random_affine(tf.identity(x), affine=affine, seed=copy_seed)
      total += losses.normalize_rows(encoder(copy, training=False))
    return total / (copies + 1)

  return mean


def enlarge(images, labels, factor, *, affine, seed, chunk=10000):
  """The images, then factor − 1 rounds of random affine copies of them.

  Args:
    images: [N, H, W, C] float32 NumPy.
    labels: [N] ints or None.
    factor: int >= 1.
    affine: an `Affine`, the copies' largest change.
    seed: int; one seed gives one set.
    chunk: images warped per call.

  Returns:
    (images [factor N, H, W, C] float32, labels [factor N] or None).
  """
  if factor < 1 or affine is None:
    raise ValueError(f"enlarge needs factor >= 1 and an affine change, got "
                     f"{factor} and {affine}.")
  n = len(images)
  out = np.empty((factor * n,) + images.shape[1:], np.float32)
  out[:n] = images
  for r in range(1, factor):
    for start in range(0, n, chunk):
      x = tf.constant(images[start:start + chunk], tf.float32)
      out[r * n + start:r * n + start + len(x)] = random_affine(
          x, affine=affine, seed=tf.constant([seed, r]), first=start,
          total=n).numpy()  # round r's maps, whatever the chunk
  return out, None if labels is None else np.tile(labels, factor)

"""Random affine copies of a batch, in-graph (ours: the paper has none).

Pre-training can add, for every image of a batch, a copy under a small
random rotation, scaling, shear and shift, and make each (image, copy) pair
an anchor of eq. 5 (`losses.with_copy_anchors`). The pair is the one anchor
known to share a cluster without labels, and pulling it together teaches
the encoder to ignore the pose and slant that otherwise split a digit
class along a style axis (RESULTS.md, "Session 5"). An optional smooth
random warp on top of the affine map (`Affine.elastic`, `warp`) adds
local deformations of the strokes.
"""

import math
from typing import NamedTuple

import tensorflow as tf


class Affine(NamedTuple):
  """Largest random change per image; each is drawn uniformly in ±value."""
  rotation: float     # degrees
  scale: float        # relative: 0.1 draws scales in [0.9, 1.1]
  shear: float        # x-shift per unit of y (a slant)
  translation: float  # pixels, x and y drawn independently
  # Ours: the probability that a copy is also mirrored left to right (a
  # turntable object seen in a mirror looks like itself from the mirrored
  # pose); 0: never, and the maps are those of the 4-number form.
  flip: float = 0.0
  # Ours: the largest displacement, in pixels, of a smooth random warp
  # applied after the affine map (an "elastic" distortion: a 4x4 grid of
  # displacements drawn in ±value, bilinearly spread over the image); 0:
  # none, and the maps are those of the 4- or 5-number form.
  elastic: float = 0.0

  @classmethod
  def parse(cls, values):
    """An Affine from 4 to 6 numbers (a config's `augment`); () gives None."""
    values = tuple(float(v) for v in values)
    if not values:
      return None
    if (len(values) not in (4, 5, 6)
        or any(not math.isfinite(v) or v < 0 for v in values)
        or (len(values) >= 5 and values[4] > 1)):
      raise ValueError(
          f"augment must be empty (off) or 4 finite numbers >= 0: rotation "
          f"in degrees, scale, shear, translation in pixels, and optionally "
          f"a fifth, the probability in [0, 1] of a left-right mirror, and "
          f"a sixth, the largest elastic displacement in pixels; got "
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


def random_affine(x, *, affine, seed):
  """Each image of x under its own random affine map (bilinear, zero fill),
  then its own smooth random warp where `affine.elastic` > 0.

  Args:
    x: [B, H, W, C] float images.
    affine: an `Affine`, the largest change per image.
    seed: [2] int, the stateless seed; one seed gives one set of maps.

  Returns:
    [B, H, W, C] float. A zero `Affine` returns x unchanged.
  """
  shape = tf.shape(x)
  b, h, w = shape[0], shape[1], shape[2]
  u = tf.random.stateless_uniform([b, 5], seed=seed, minval=-1.0,
                                  maxval=1.0, dtype=x.dtype)
  angle = u[:, 0] * (affine.rotation * math.pi / 180.0)
  scale = 1.0 + u[:, 1] * affine.scale
  shear = u[:, 2] * affine.shear
  tx, ty = u[:, 3] * affine.translation, u[:, 4] * affine.translation
  # The op maps each output pixel (x, y) to the input point
  # M (x - c) + c + t, with M = rotation · shear / scale.
  cos, sin = tf.cos(angle) / scale, tf.sin(angle) / scale
  m00, m01 = cos, shear * cos - sin
  m10, m11 = sin, shear * sin + cos
  if affine.flip > 0:
    # A mirrored copy reads the input at x -> 2c - x: M's x column negated.
    # Its own draw, so a zero flip leaves the 4-number maps unchanged.
    mirror = tf.random.stateless_uniform(
        [b], seed=tf.random.experimental.stateless_fold_in(seed, 7),
        dtype=x.dtype) < affine.flip
    sign = tf.where(mirror, -tf.ones_like(angle), tf.ones_like(angle))
    m00, m10 = m00 * sign, m10 * sign
  cx = (tf.cast(w, x.dtype) - 1.0) / 2.0
  cy = (tf.cast(h, x.dtype) - 1.0) / 2.0
  zeros = tf.zeros_like(angle)
  transforms = tf.stack(
      [m00, m01, cx - m00 * cx - m01 * cy + tx,
       m10, m11, cy - m10 * cx - m11 * cy + ty, zeros, zeros], axis=1)
  out = resample(x, transforms)
  if affine.elastic > 0:
    # Its own draw, so a zero elastic leaves the other maps unchanged.
    grid = tf.random.stateless_uniform(
        [b, 4, 4, 2], seed=tf.random.experimental.stateless_fold_in(seed, 11),
        minval=-1.0, maxval=1.0, dtype=x.dtype) * affine.elastic
    flow = tf.image.resize(grid, tf.stack([h, w]), method="bilinear")
    out = warp(out, flow)
  return out


def warp(x, flow):
  """x resampled at each pixel plus its displacement (bilinear, zero fill).

  Args:
    x: [B, H, W, C] float images.
    flow: [B, H, W, 2] float; output pixel (i, j) reads x at
      (i + flow[..., 0], j + flow[..., 1]).

  Returns:
    [B, H, W, C], x's dtype. A zero flow returns x.
  """
  shape = tf.shape(x)
  b, h, w, c = shape[0], shape[1], shape[2], shape[3]
  hf, wf = tf.cast(h, x.dtype), tf.cast(w, x.dtype)
  rows = tf.cast(tf.range(h), x.dtype)[None, :, None]
  cols = tf.cast(tf.range(w), x.dtype)[None, None, :]
  # Points outside the image read the zero border of a 1-pixel padding.
  y = tf.clip_by_value(rows + flow[..., 0], -1.0, hf)
  xs = tf.clip_by_value(cols + flow[..., 1], -1.0, wf)
  y0 = tf.clip_by_value(tf.floor(y), -1.0, hf - 1.0)
  x0 = tf.clip_by_value(tf.floor(xs), -1.0, wf - 1.0)
  wy, wx = (y - y0)[..., None], (xs - x0)[..., None]
  padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
  flat = tf.reshape(padded, [b, -1, c])
  iy, ix = tf.cast(y0, tf.int32) + 1, tf.cast(x0, tf.int32) + 1

  def at(dy, dx):
    index = tf.reshape((iy + dy) * (w + 2) + ix + dx, [b, -1])
    return tf.reshape(tf.gather(flat, index, batch_dims=1), [b, h, w, c])

  top = at(0, 0) * (1.0 - wx) + at(0, 1) * wx
  bottom = at(1, 0) * (1.0 - wx) + at(1, 1) * wx
  return top * (1.0 - wy) + bottom * wy

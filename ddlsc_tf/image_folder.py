"""Users' own images: a folder of PNG/JPEG files or a .npy array, in memory.

Two folder layouts are read:

  PATH/cat/001.png, PATH/dog/002.jpg, ...   one sub-folder per class: labels
                                            are the sub-folder's index in
                                            sorted order (for evaluation only)
  PATH/001.png, PATH/002.jpg, ...           no labels

Files are read in sorted order, so a folder always loads the same way. Names
starting with "." (e.g. macOS "._x.png" resource files) and the folders of
`SYSTEM_FOLDERS` (e.g. Synology's "@eaDir" thumbnails) are skipped. An image
two or more sub-folders down (PATH/cat/small/001.png) fits neither layout and
is refused by name rather than left out.
"""

import io
import os
import pathlib
import re
from typing import NamedTuple, Optional

from absl import logging
import numpy as np
import PIL.Image
import tensorflow as tf

from ddlsc_tf import validation

EXTENSIONS = (".png", ".jpg", ".jpeg")  # matched in any case


class ImageFolder(NamedTuple):
  """Images with their labels and where they came from.

  images: [N, H, W, C] float32 in [0, 1], C in (1, 3).
  labels: [N] int64 index into class_names, or None for unlabelled images.
  file_names: N str, paths relative to the folder ("cat/001.png"), or the
    row index ("0", "1", ...) for a .npy array.
  class_names: K str sub-folder names in label order, or None.
  """
  images: np.ndarray
  labels: Optional[np.ndarray]
  file_names: list
  class_names: Optional[list]


def load_images_from_path(path, *, image_size=None, channels=None,
                          max_examples=None):
  """Loads a folder of images or a .npy array, whichever `path` names.

  Args:
    path: a folder (see `load_image_folder`) or a file ending in .npy (see
      `load_array`).
    image_size: (height, width) to resize every image to, or None.
    channels: 1 (gray), 3 (RGB), or None: 1 if every image is stored gray,
      else 3.
    max_examples: keep at most this many images, evenly spaced over the
      sorted order (so every class keeps its share), or None for all.

  Returns:
    an `ImageFolder`; for an array: labels and class_names are None and
    file_names are the row indices "0", "1", ....
  """
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no such folder or .npy file: {path}")
  if not path.lower().endswith(".npy"):
    return load_image_folder(path, image_size=image_size, channels=channels,
                             max_examples=max_examples)
  _check_options(image_size, channels, max_examples)
  images = load_array(path)
  images = images[_evenly_spaced(len(images), max_examples)]
  if image_size is not None and _upscaled(images.shape[1:], image_size):
    _warn_upscaled([str(i) for i in range(len(images))], path, image_size)
  images = _convert(tf.constant(images),
                    channels=_default_channels([images.shape[-1]], channels),
                    image_size=image_size)
  return ImageFolder(images=images.numpy(), labels=None,
                     file_names=[str(i) for i in range(len(images))],
                     class_names=None)


def load_image_folder(path, *, image_size=None, channels=None,
                      max_examples=None):
  """Loads every .png/.jpg/.jpeg image of a folder into memory.

  Without `image_size` all images must share one size. Images are turned
  upright by their EXIF orientation; an alpha channel is composited by
  `validation.composite_alpha`. A folder with a single sub-folder holds
  unlabelled images (a warning says so), not one class.

  Args:
    path: the folder, laid out as in the module docstring.
    image_size: (height, width) to resize every image to (bilinear with
      antialiasing), or None.
    channels: 1 (gray), 3 (RGB), or None: 1 if every image is stored gray,
      else 3 (gray images are then repeated over RGB).
    max_examples: keep at most this many images, evenly spaced over the
      sorted order (so every class keeps its share), or None for all.

  Returns:
    an `ImageFolder`.
  """
  _check_options(image_size, channels, max_examples)
  root = pathlib.Path(path)
  if not root.exists():
    raise FileNotFoundError(f"image folder {path} does not exist.")
  if not root.is_dir():
    raise NotADirectoryError(f"{path} is not a folder (give a folder of "
                             f"{'/'.join(EXTENSIONS)} images or a .npy file).")
  file_names, labels, class_names = _list_images(root)
  keep = _evenly_spaced(len(file_names), max_examples)
  file_names = [file_names[i] for i in keep]
  labels = None if labels is None else labels[keep]

  decoded, upscaled = [], []
  for name in file_names:
    image = _decode(root / name)
    if (image_size is None and decoded
        and image.shape[:2] != decoded[0].shape[:2]):
      raise ValueError(
          f"images differ in size: {root / file_names[0]} is "
          f"{_size(decoded[0])} but {root / name} is {_size(image)} (height x "
          f"width); pass image_size=(height, width) to resize them all.")
    if image_size is not None and _upscaled(image.shape, image_size):
      upscaled.append(name)
    decoded.append(_convert(image, channels=None, image_size=image_size))
  _warn_upscaled(upscaled, root, image_size)
  channels = _default_channels([image.shape[-1] for image in decoded],
                               channels)
  images = np.stack([
      _convert(image, channels=channels, image_size=None).numpy()
      for image in decoded])
  return ImageFolder(images=images, labels=labels, file_names=file_names,
                     class_names=class_names)


def load_array(path):
  """Loads images saved with `np.save`, scaled to [0, 1].

  Args:
    path: a .npy file of [N, H, W] or [N, H, W, C] images, C in 1-4 (an
      alpha channel composited as files' are): uint8 in 0-255 (divided by
      255) or float in [0, 1] (kept).

  Returns:
    [N, H, W, C] float32 in [0, 1], C in (1, 3) (1 for [N, H, W] input).
  """
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"array file {path} does not exist.")
  with open(path, "rb") as f:
    head = f.read(len(np.lib.format.MAGIC_PREFIX))
  if head[:2] == b"PK":
    raise ValueError(f"{path} is not a single .npy array (an .npz archive?).")
  if head != np.lib.format.MAGIC_PREFIX:
    # np.load would blame pickling (allow_pickle) for any other file.
    raise ValueError(f"{path} is not a .npy file (it does not start with "
                     f"NumPy's header); save the images with np.save.")
  try:
    images = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    raise ValueError(f"cannot read {path} as a .npy array: {e}") from None
  if (images.ndim not in (3, 4) or not images.size
      or images.ndim == 4 and images.shape[-1] not in (1, 2, 3, 4)):
    raise ValueError(
        f"{path} holds an array of shape {images.shape}; expected images "
        f"[N, H, W] or [N, H, W, C] with N, H, W > 0 and C in 1-4 (gray or "
        f"RGB, each with an optional alpha).")
  if images.dtype == np.uint8:
    images = images.astype(np.float32) / 255.0
  elif np.issubdtype(images.dtype, np.floating):
    _check_unit_range(path, images)
    images = images.astype(np.float32)
  else:
    raise ValueError(f"{path} holds {images.dtype} values; expected uint8 "
                     f"(0-255) or float (0-1).")
  return (images[..., None] if images.ndim == 3
          else validation.composite_alpha(images))


def _check_unit_range(path, images):
  """Raises a ValueError naming a non-finite or out-of-range value."""
  finite = np.isfinite(images)
  if not finite.all():
    where = np.unravel_index(np.argmin(finite), images.shape)
    raise ValueError(f"{path} holds {images[where]} at index "
                     f"{tuple(int(i) for i in where)}; expected values in "
                     f"[0, 1].")
  low, high = images.min(), images.max()
  if low < 0 or high > 1:
    where = np.unravel_index(
        np.argmax(images) if high > 1 else np.argmin(images), images.shape)
    raise ValueError(
        f"{path} holds {images[where]} at index "
        f"{tuple(int(i) for i in where)} (values span [{low}, {high}]); "
        f"float images must lie in [0, 1] (save uint8 0-255, or divide by "
        f"255 first).")


def _check_options(image_size, channels, max_examples):
  if image_size is not None:
    if (not isinstance(image_size, (tuple, list)) or len(image_size) != 2
        or not all(isinstance(v, (int, np.integer)) and v > 0
                   for v in image_size)):
      raise ValueError(f"image_size must be (height, width) with positive "
                       f"ints, got {image_size!r}.")
  if channels not in (None, 1, 3):
    raise ValueError(f"channels must be 1 (gray), 3 (RGB) or None, got "
                     f"{channels!r}.")
  if max_examples is not None and (
      not isinstance(max_examples, (int, np.integer)) or max_examples < 1):
    raise ValueError(f"max_examples must be a positive int or None, got "
                     f"{max_examples!r}.")


def _is_image(entry):
  return (entry.is_file() and not entry.name.startswith(".")
          and entry.suffix.lower() in EXTENSIONS)


# Folders that file systems and archivers add beside a user's images
# (Synology's thumbnails, recycle bins, macOS zip metadata): never classes.
SYSTEM_FOLDERS = ("@eaDir", "#recycle", "#snapshot", "__MACOSX")


def _skipped_folder(name):
  return name.startswith(".") or name in SYSTEM_FOLDERS


def _first_deeper_image(root):
  """The first image two or more sub-folders below `root`, or None."""
  for folder, subfolders, files in os.walk(root):
    subfolders[:] = sorted(d for d in subfolders if not _skipped_folder(d))
    relative = pathlib.Path(folder).relative_to(root)
    if len(relative.parts) >= 2:
      for name in sorted(files):
        if _is_image(pathlib.Path(folder, name)):
          return relative / name
  return None


def _list_images(root):
  """(relative file names, labels [N] int64 or None, class names or None)."""
  deeper = _first_deeper_image(root)
  if deeper is not None:
    raise ValueError(
        f"{root} holds {deeper}, {len(deeper.parts) - 1} sub-folders down; "
        f"images are read directly in {root} (unlabelled) or one level down, "
        f"in one sub-folder per class (labelled). Move the images up, or "
        f"point at a folder with one of these layouts.")
  direct = sorted(entry.name for entry in root.iterdir() if _is_image(entry))
  per_class = {}
  for folder in sorted(root.iterdir()):
    if folder.is_dir() and not _skipped_folder(folder.name):
      names = sorted(entry.name for entry in folder.iterdir()
                     if _is_image(entry))
      if names:
        per_class[folder.name] = names
  if direct and per_class:
    first_class = next(iter(per_class))
    raise ValueError(
        f"{root} holds images both directly ({direct[0]}, ...) and in "
        f"sub-folders ({first_class}/{per_class[first_class][0]}, ...); put "
        f"every image in a class sub-folder (labelled) or all directly in "
        f"{root} (unlabelled).")
  if direct:
    return direct, None, None
  if len(per_class) == 1:
    only = next(iter(per_class))
    logging.warning("%s holds its images in one sub-folder (%s/): read as "
                    "unlabelled images, not as one class.", root, only)
    return [f"{only}/{name}" for name in per_class[only]], None, None
  if not per_class:
    raise ValueError(f"no image files ({', '.join(EXTENSIONS)}, any case) in "
                     f"{root} or its sub-folders.")
  class_names = list(per_class)
  file_names = [f"{c}/{name}" for c in class_names for name in per_class[c]]
  labels = np.repeat(np.arange(len(class_names), dtype=np.int64),
                     [len(per_class[c]) for c in class_names])
  return file_names, labels, class_names


def _evenly_spaced(n, max_examples):
  if max_examples is None or max_examples >= n:
    return np.arange(n)
  return np.arange(max_examples) * n // max_examples


def _decode(file):
  """[H, W, C] float32 in [0, 1], C in (1, 3): turned upright as its EXIF
  orientation says, an alpha channel composited
  (`validation.composite_alpha`)."""
  data = file.read_bytes()
  try:
    image = tf.io.decode_image(data, dtype=tf.float32,
                               expand_animations=False).numpy()
  except tf.errors.OpError as e:
    # Keep TF's reason ("Invalid PNG data"), not its op and device names.
    reason = re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:\w+\]", "", e.message)
    raise ValueError(f"cannot decode image {file}: {reason}") from None
  return tf.constant(validation.composite_alpha(_upright(image, data)))


# EXIF orientation → the turn that shows the image upright: (np.rot90's k,
# counter-clockwise quarter turns; then a left-right mirror).
_ORIENTATIONS = {2: (0, True), 3: (2, False), 4: (2, True), 5: (3, True),
                 6: (3, False), 7: (1, True), 8: (1, False)}


def _upright(image, data):
  """`image` [H, W, C] turned as the EXIF orientation tag of the file's
  bytes `data` says (phone cameras store turned pictures with a tag)."""
  try:
    with PIL.Image.open(io.BytesIO(data)) as opened:
      orientation = opened.getexif().get(0x0112, 1)
  except (OSError, SyntaxError, ValueError):
    return image
  turns, mirror = _ORIENTATIONS.get(orientation, (0, False))
  image = np.rot90(image, k=turns)
  return np.ascontiguousarray(image[:, ::-1] if mirror else image)


def _upscaled(shape, image_size):
  """Whether an image of `shape` [H, W, ...] is enlarged over 4x to fit."""
  return shape[0] * 4 < image_size[0] or shape[1] * 4 < image_size[1]


def _warn_upscaled(names, where, image_size):
  if names:
    logging.warning(
        "%d image(s) of %s are enlarged more than 4x to %dx%d (first: %s): "
        "they hold little to cluster by.", len(names), where, image_size[0],
        image_size[1], names[0])


def _size(image):
  return f"{image.shape[0]}x{image.shape[1]}"


def _default_channels(stored, channels):
  if channels is not None:
    return channels
  return 1 if all(c == 1 for c in stored) else 3


def _convert(images, *, channels, image_size):
  """[..., H, W, C] images to `channels` (None: as is) and `image_size`."""
  if (image_size is not None
      and tuple(images.shape[-3:-1]) != tuple(image_size)):
    images = tf.clip_by_value(
        tf.image.resize(images, image_size, method="bilinear", antialias=True),
        0.0, 1.0)
  if channels == 1 and images.shape[-1] == 3:
    images = tf.image.rgb_to_grayscale(images)
  elif channels == 3 and images.shape[-1] == 1:
    images = tf.image.grayscale_to_rgb(images)
  return images

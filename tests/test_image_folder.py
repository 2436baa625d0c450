"""Image folders and .npy arrays: layout, order, conversions, and errors."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import image_folder


def _write(path, image):
  """Writes [H, W, C] uint8 as PNG or JPEG, chosen by the suffix."""
  path.parent.mkdir(parents=True, exist_ok=True)
  encode = (tf.io.encode_jpeg if path.suffix.lower() in (".jpg", ".jpeg")
            else tf.io.encode_png)
  path.write_bytes(encode(tf.constant(image, tf.uint8)).numpy())


def _gray(h, w, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (h, w, 1), np.uint8)


def _constant(h, w, value, channels=1):
  return np.full((h, w, channels), value, np.uint8)


def test_flat_folder_is_unlabelled_sorted_and_scaled(tmp_path):
  _write(tmp_path / "b.png", _gray(8, 6, seed=1))
  _write(tmp_path / "a.PNG", _gray(8, 6, seed=0))
  _write(tmp_path / "c.JPG", _constant(8, 6, 200))
  (tmp_path / "notes.txt").write_text("not an image")
  (tmp_path / "._a.png").write_bytes(b"macOS resource fork, not a PNG")
  data = image_folder.load_image_folder(tmp_path)
  assert data.file_names == ["a.PNG", "b.png", "c.JPG"]
  assert data.labels is None and data.class_names is None
  assert data.images.shape == (3, 8, 6, 1)
  assert data.images.dtype == np.float32
  np.testing.assert_allclose(data.images[0], _gray(8, 6, seed=0) / 255,
                             atol=1e-6)
  np.testing.assert_allclose(data.images[2], 200 / 255, atol=3 / 255)
  assert 0 <= data.images.min() and data.images.max() <= 1


def test_class_sub_folders_give_labels_in_sorted_order(tmp_path):
  for name, count in [("dog", 2), ("cat", 1), ("emu", 2)]:
    for i in range(count):
      _write(tmp_path / name / f"{i}.png", _gray(4, 4, seed=i))
  (tmp_path / "empty").mkdir()
  _write(tmp_path / ".ipynb_checkpoints" / "0.png", _gray(4, 4))
  data = image_folder.load_image_folder(tmp_path)
  assert data.class_names == ["cat", "dog", "emu"]
  assert data.file_names == ["cat/0.png", "dog/0.png", "dog/1.png",
                             "emu/0.png", "emu/1.png"]
  np.testing.assert_array_equal(data.labels, [0, 1, 1, 2, 2])
  assert data.labels.dtype == np.int64
  assert data.images.shape == (5, 4, 4, 1)


def test_max_examples_keeps_every_class(tmp_path):
  for c in "abc":
    for i in range(4):
      _write(tmp_path / c / f"{i}.png", _gray(4, 4))
  data = image_folder.load_image_folder(tmp_path, max_examples=6)
  np.testing.assert_array_equal(data.labels, [0, 0, 1, 1, 2, 2])


def test_resize_to_image_size(tmp_path):
  _write(tmp_path / "big.png", _constant(12, 10, 128))
  _write(tmp_path / "small.png", _constant(8, 8, 128))
  data = image_folder.load_image_folder(tmp_path, image_size=(4, 5))
  assert data.images.shape == (2, 4, 5, 1)
  np.testing.assert_allclose(data.images, 128 / 255, atol=1e-5)


def test_differing_sizes_name_both_files(tmp_path):
  _write(tmp_path / "a.png", _gray(8, 8))
  _write(tmp_path / "b.png", _gray(12, 10))
  with pytest.raises(ValueError, match=r"a\.png is 8x8 but .*b\.png is 12x10"
                     r".*image_size"):
    image_folder.load_image_folder(tmp_path)


def test_default_channels_are_rgb_when_any_image_is_rgb(tmp_path):
  _write(tmp_path / "gray.png", _constant(4, 4, 100))
  _write(tmp_path / "red.png", np.tile([[[255, 0, 0]]], (4, 4, 1)))
  data = image_folder.load_image_folder(tmp_path)
  assert data.images.shape == (2, 4, 4, 3)
  np.testing.assert_allclose(data.images[0], 100 / 255, atol=1e-6)
  np.testing.assert_allclose(data.images[1, 0, 0], [1, 0, 0])


def test_channels_one_converts_rgb_to_gray(tmp_path):
  _write(tmp_path / "red.png", np.tile([[[255, 0, 0]]], (4, 4, 1)))
  data = image_folder.load_image_folder(tmp_path, channels=1)
  assert data.images.shape == (1, 4, 4, 1)
  np.testing.assert_allclose(data.images, 0.2989, atol=1e-3)  # ITU-R 601


def test_channels_three_repeats_gray_and_alpha_is_composited(tmp_path):
  _write(tmp_path / "gray.png", _constant(4, 4, 50))
  _write(tmp_path / "gray_alpha.png", np.concatenate(
      [_constant(4, 4, 50), _constant(4, 4, 255)], axis=-1))
  assert image_folder.load_image_folder(tmp_path).images.shape == (2, 4, 4, 1)
  data = image_folder.load_image_folder(tmp_path, channels=3)
  assert data.images.shape == (2, 4, 4, 3)
  np.testing.assert_allclose(data.images, 50 / 255, atol=1e-6)


def test_a_dark_drawing_on_transparent_is_composited_over_white(tmp_path):
  # Opaque on the left half only; its pixels are dark (50 / 255 < 0.5), so
  # the transparent half becomes white (validation.composite_alpha).
  alpha = np.zeros((4, 4, 1), np.uint8)
  alpha[:, :2] = 255
  _write(tmp_path / "stroke.png",
         np.concatenate([_constant(4, 4, 50), alpha], axis=-1))
  data = image_folder.load_image_folder(tmp_path)
  assert data.images.shape == (1, 4, 4, 1)
  np.testing.assert_allclose(data.images[0, :, :2], 50 / 255, atol=1e-6)
  np.testing.assert_allclose(data.images[0, :, 2:], 1.0, atol=1e-6)


def test_missing_folder_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere"):
    image_folder.load_image_folder(tmp_path / "nowhere")


def test_folder_without_images_names_folder_and_extensions(tmp_path):
  (tmp_path / "readme.txt").write_text("hi")
  with pytest.raises(ValueError, match=rf"\.png, \.jpg, \.jpeg.*{tmp_path}"):
    image_folder.load_image_folder(tmp_path)


def test_corrupt_image_is_named(tmp_path):
  _write(tmp_path / "a.png", _gray(4, 4))
  (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 truncated jpeg")
  with pytest.raises(ValueError, match=r"cannot decode image .*broken\.jpg"):
    image_folder.load_image_folder(tmp_path)


def test_images_both_direct_and_in_sub_folders_are_ambiguous(tmp_path):
  _write(tmp_path / "loose.png", _gray(4, 4))
  _write(tmp_path / "cat" / "0.png", _gray(4, 4))
  with pytest.raises(ValueError, match=r"loose\.png.*cat/0\.png"):
    image_folder.load_image_folder(tmp_path)


@pytest.mark.parametrize("deeper, beside", [
    ("cat/small/0.png", "cat/1.png"),  # below a class folder's own images
    ("2024/cat/0.png", None),          # a layout one level too deep
])
def test_an_image_deeper_than_one_sub_folder_is_named(tmp_path, deeper,
                                                       beside):
  if beside:
    _write(tmp_path / beside, _gray(4, 4))
  _write(tmp_path / deeper, _gray(4, 4))
  with pytest.raises(ValueError, match=rf"holds {deeper}, 2 sub-folders down"):
    image_folder.load_image_folder(tmp_path)


def test_hidden_and_system_folders_are_ignored(tmp_path):
  _write(tmp_path / "cat" / "1.png", _gray(4, 4))
  _write(tmp_path / "dog" / "1.png", _gray(4, 4))
  _write(tmp_path / "cat" / ".thumbs" / "1.png", _gray(4, 4))
  # Synology's thumbnails: a folder per image, inside each class.
  _write(tmp_path / "cat" / "@eaDir" / "1.png" / "SYNOFILE_THUMB_M.jpg",
         _gray(4, 4))
  _write(tmp_path / "__MACOSX" / "cat" / "1.png", _gray(4, 4))
  loaded = image_folder.load_image_folder(tmp_path)
  assert loaded.file_names == ["cat/1.png", "dog/1.png"]
  assert loaded.class_names == ["cat", "dog"]


def test_images_enlarged_over_4x_are_warned_of(tmp_path, caplog):
  _write(tmp_path / "images" / "tiny.png", _gray(4, 4))
  _write(tmp_path / "images" / "fine.png", _gray(8, 8))  # 4x: no warning
  np.save(tmp_path / "arrays.npy", np.zeros((2, 7, 8), np.uint8))

  def warnings(path, size):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      image_folder.load_images_from_path(str(path), image_size=size)
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING]

  found = warnings(tmp_path / "images", (32, 32))
  assert len(found) == 1 and "1 image(s)" in found[0], found
  assert "tiny.png" in found[0] and "32x32" in found[0]
  assert warnings(tmp_path / "images", (16, 16)) == []
  found = warnings(tmp_path / "arrays.npy", (32, 32))
  assert len(found) == 1 and "2 image(s)" in found[0], found


@pytest.mark.parametrize("options,bad", [
    ({"channels": 2}, "2"), ({"image_size": (0, 4)}, r"\(0, 4\)"),
    ({"image_size": 28}, "28"), ({"max_examples": 0}, "0")])
def test_bad_options_are_named(tmp_path, options, bad):
  _write(tmp_path / "a.png", _gray(4, 4))
  with pytest.raises(ValueError, match=rf"got {bad}\."):
    image_folder.load_image_folder(tmp_path, **options)


def test_uint8_array_round_trip(tmp_path):
  x = np.random.default_rng(0).integers(0, 256, (5, 6, 7), np.uint8)
  np.save(tmp_path / "x.npy", x)
  images = image_folder.load_array(tmp_path / "x.npy")
  assert images.shape == (5, 6, 7, 1) and images.dtype == np.float32
  np.testing.assert_allclose(images[..., 0], x / 255, atol=1e-7)


def test_an_opaque_alpha_channel_of_an_array_is_dropped(tmp_path):
  x = np.random.default_rng(0).integers(0, 256, (2, 4, 4, 4), np.uint8)
  x[..., 3] = 255
  np.save(tmp_path / "x.npy", x)
  images = image_folder.load_array(tmp_path / "x.npy")
  assert images.shape == (2, 4, 4, 3)
  np.testing.assert_allclose(images, x[..., :3] / 255, atol=1e-6)


def test_float_array_is_kept(tmp_path):
  x = np.random.default_rng(0).random((3, 4, 4, 3))
  np.save(tmp_path / "x.npy", x)
  np.testing.assert_allclose(image_folder.load_array(tmp_path / "x.npy"), x,
                             rtol=1e-6)


@pytest.mark.parametrize("array,message", [
    (np.zeros((4, 5)), r"shape \(4, 5\)"),
    (np.zeros((2, 4, 4, 5)), r"shape \(2, 4, 4, 5\)"),
    (np.zeros((2, 3, 3), np.int64), "int64"),
    (np.where(np.arange(18).reshape(2, 3, 3) == 7, np.nan, 0.5),
     r"nan at index \(0, 2, 1\)"),
    (np.where(np.arange(18).reshape(2, 3, 3) == 4, 255.0, 0.5),
     r"255\.0 at index \(0, 1, 1\)"),
    (np.full((2, 3, 3), -0.5), r"-0\.5 at index")])
def test_bad_arrays_name_the_file_and_the_problem(tmp_path, array, message):
  np.save(tmp_path / "bad.npy", array)
  with pytest.raises(ValueError, match=rf"bad\.npy.*{message}"):
    image_folder.load_array(tmp_path / "bad.npy")


@pytest.mark.parametrize("content, message", [
    (b"0.1,0.2\n0.3,0.4\n", "is not a .npy file"),  # a CSV renamed
    (b"PK\x03\x04 rest of an archive",
     r"is not a single \.npy array \(an \.npz"),
])
def test_a_file_that_is_not_npy_is_named_as_such(tmp_path, content, message):
  (tmp_path / "x.npy").write_bytes(content)
  with pytest.raises(ValueError, match=rf"x\.npy {message}"):
    image_folder.load_array(tmp_path / "x.npy")


def test_load_images_from_path_reads_arrays(tmp_path):
  x = np.random.default_rng(0).integers(0, 256, (3, 8, 8), np.uint8)
  np.save(tmp_path / "x.npy", x)
  data = image_folder.load_images_from_path(tmp_path / "x.npy", channels=3,
                                            image_size=(4, 4))
  assert data.images.shape == (3, 4, 4, 3)
  assert data.file_names == ["0", "1", "2"]
  assert data.labels is None and data.class_names is None


def test_load_images_from_path_reads_folders(tmp_path):
  _write(tmp_path / "cat" / "0.png", _gray(4, 4))
  _write(tmp_path / "dog" / "0.png", _gray(4, 4))
  data = image_folder.load_images_from_path(tmp_path)
  assert isinstance(data, image_folder.ImageFolder)
  assert data.class_names == ["cat", "dog"]
  assert data.file_names == ["cat/0.png", "dog/0.png"]


def test_load_images_from_path_rejects_other_paths(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing"):
    image_folder.load_images_from_path(tmp_path / "missing.npy")
  _write(tmp_path / "one.png", _gray(4, 4))
  with pytest.raises(NotADirectoryError, match=r"one\.png"):
    image_folder.load_images_from_path(tmp_path / "one.png")

r"""Writes the tiny COIL archives the builder tests read (run once, commit).

`python tests/dummy_data/make_coil_archives.py` from the repository root
rewrites, byte for byte the same:

  coil20/coil-20-proc.zip   coil-20-proc/obj{1,2,10,20}__{0,71}.png, 128x128 gray
  coil100/coil-100.zip      coil-100/obj{1,2,10,100}__{0,355}.png, 128x128 RGB

Each image is flat, with value v = 2 * object id + (pose != 0), so a test
can tell from the pixels which file an example came from (RGB: v, 255 - v,
v // 2). Objects 2 and 10 catch alphabetical ordering (obj10 < obj2).
"""

import pathlib
import zipfile

import numpy as np
import tensorflow as tf

HERE = pathlib.Path(__file__).resolve().parent
ARCHIVES = {
    # folder: (zip, top folder, object ids, poses in the file names, channels)
    "coil20": ("coil-20-proc.zip", "coil-20-proc", (1, 2, 10, 20), (0, 71), 1),
    "coil100": ("coil-100.zip", "coil-100", (1, 2, 10, 100), (0, 355), 3),
}


def pixel_value(object_id, pose):
  return 2 * object_id + int(pose != 0)


def flat_image(value, channels):
  """[128, 128, channels] uint8; channel c of an RGB image differs."""
  values = [value, 255 - value, value // 2][:channels]
  return np.broadcast_to(np.array(values, np.uint8), (128, 128, channels))


def write_archive(path, folder, object_ids, poses, channels):
  path.parent.mkdir(parents=True, exist_ok=True)
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr(zipfile.ZipInfo(f"{folder}/", date_time=(1996, 1, 1, 0, 0, 0)),
                b"")
    for object_id in object_ids:
      for pose in poses:
        png = tf.io.encode_png(
            flat_image(pixel_value(object_id, pose), channels)).numpy()
        info = zipfile.ZipInfo(f"{folder}/obj{object_id}__{pose}.png",
                               date_time=(1996, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, png)


def main():
  for subdir, (name, folder, object_ids, poses, channels) in ARCHIVES.items():
    path = HERE / subdir / name
    write_archive(path, folder, object_ids, poses, channels)
    print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
  main()

"""TFDS builder `coil20`: COIL-20 processed, from a manually downloaded zip.

1440 gray 128x128 images of 20 objects on a turntable, 72 poses each, 5
degrees apart (Nene, Nayar & Murase, 1996). TFDS has no builder for it.
"""

import numpy as np
import tensorflow_datasets as tfds

from ddlsc_tf.datasets import coil_archive

ARCHIVE = "coil-20-proc.zip"
_FOLDER = "coil-20-proc"
_HOMEPAGE = "https://www.cs.columbia.edu/CAVE/software/softlib/coil-20.php"
_NUM_OBJECTS = 20
_DEGREES_PER_POSE = 5

_CITATION = """@techreport{nene1996coil20,
  title={Columbia Object Image Library (COIL-20)},
  author={Nene, Sameer A and Nayar, Shree K and Murase, Hiroshi},
  institution={Columbia University},
  number={CUCS-005-96},
  year={1996}
}"""


class Coil20(tfds.core.GeneratorBasedBuilder):
  """COIL-20 processed: image, label = object id - 1, object_id, angle."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""
  Download the processed images, {ARCHIVE} (folder {_FOLDER}/ with
  obj1__0.png ... obj20__71.png), from {_HOMEPAGE}
  and put the zip, unextracted, in the manual_dir
  (default: <data_dir>/downloads/manual/).
  """

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=(
            "COIL-20 processed: 1440 gray 128x128 images of 20 objects, 72 "
            "poses per object taken 5 degrees apart on a turntable. `label` "
            "is the object id - 1 (obj1 -> 0, obj20 -> 19), `object_id` the "
            "id in the file name (1..20), `angle` the pose in degrees."),
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(128, 128, 1)),
            "label": tfds.features.ClassLabel(
                names=[f"obj{i}" for i in range(1, _NUM_OBJECTS + 1)]),
            "object_id": np.int64,
            "angle": np.int64,
        }),
        supervised_keys=("image", "label"),
        homepage=_HOMEPAGE,
        citation=_CITATION,
    )

  def _split_generators(self, dl_manager):
    archive = coil_archive.manual_archive(
        dl_manager.manual_dir, ARCHIVE, self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return {"train": self._generate_examples(archive)}

  def _generate_examples(self, archive):
    for file_name, object_id, pose, png in coil_archive.iter_pngs(
        archive, _FOLDER):
      yield file_name, {
          "image": png,
          "label": object_id - 1,
          "object_id": object_id,
          "angle": pose * _DEGREES_PER_POSE,
      }

"""TFDS builder `coil100_manual`: the stock `coil100`, from a local zip.

The stock builder downloads the Columbia `coil-100.zip` and checks its
sha256, so a rebuilt archive with the same PNGs is rejected. This subclass
keeps the stock features and metadata and reads `coil-100.zip` from the
manual_dir instead, producing the same examples (keys are the file names).
Its `object_id` (ClassLabel obj1..obj100) is the object id - 1; the stock
supervised label, `angle_label`, is the pose, not the object.
"""

from etils import epath
import tensorflow_datasets as tfds
from tensorflow_datasets.datasets.coil100 import coil100_dataset_builder

from ddlsc_tf.datasets import coil_archive

ARCHIVE = "coil-100.zip"
_FOLDER = "coil-100"


class Coil100Manual(coil100_dataset_builder.Builder):
  """COIL-100 from a manual `coil-100.zip`; features as the stock coil100."""

  # The stock README, citation and tags (TFDS reads them from this folder).
  pkg_dir_path = epath.Path(coil100_dataset_builder.__file__).parent
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""
  Download {ARCHIVE} (folder {_FOLDER}/ with obj1__0.png ...
  obj100__355.png) from
  https://www.cs.columbia.edu/CAVE/software/softlib/coil-100.php
  and put the zip, unextracted, in the manual_dir
  (default: <data_dir>/downloads/manual/). A rebuilt zip with the same PNGs
  works too.
  """

  def _split_generators(self, dl_manager):
    archive = coil_archive.manual_archive(
        dl_manager.manual_dir, ARCHIVE, self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return {tfds.Split.TRAIN: self._generate_examples(archive)}

  def _generate_examples(self, archive):
    """The stock builder's examples, read from the zip instead of a folder."""
    for file_name, object_id, angle, png in coil_archive.iter_pngs(
        archive, _FOLDER):
      yield file_name, {
          "image": png,
          "angle_label": str(angle),
          "object_id": f"obj{object_id}",
          "angle": angle,
      }

"""Reading a COIL archive: a zip with one top folder of `obj<N>__<P>.png`.

Both COIL-20 (`coil-20-proc/obj1__0.png`, P = pose index 0..71) and
COIL-100 (`coil-100/obj1__0.png`, P = angle 0, 5, ..., 355) use this layout.
Files are read from the zip one at a time, without extracting it.
"""

import re
import zipfile

from etils import epath

_PNG_NAME = re.compile(r"obj(\d+)__(\d+)\.png")


class MissingArchiveError(FileNotFoundError):
  """A manually downloaded archive is not where the builder looks for it."""


def manual_archive(manual_dir, file_name, instructions):
  """Path of `file_name` in `manual_dir`; raises if it is not there.

  Args:
    manual_dir: folder (str or path) that should hold the archive.
    file_name: the archive's name, e.g. "coil-20-proc.zip".
    instructions: where to get it, appended to the error.

  Returns:
    epath.Path of the archive.
  """
  path = epath.Path(manual_dir) / file_name
  if not path.exists():
    raise MissingArchiveError(
        f"{path} not found. {instructions.strip()}")
  return path


def iter_pngs(archive, folder):
  """Yields every `<folder>/obj<N>__<P>.png` of a zip, by (N, P) numerically.

  Numeric order (obj2 before obj10) only makes generation deterministic;
  labels come from N, never from a position.

  Args:
    archive: path of the zip.
    folder: its top folder, e.g. "coil-20-proc".

  Yields:
    (file_name, object_id N, P, PNG bytes); file_name is e.g. "obj1__0.png".

  Raises:
    ValueError: the zip holds no such file.
  """
  with epath.Path(archive).open("rb") as f, zipfile.ZipFile(f) as zf:
    entries = []
    for member in zf.namelist():
      parent, _, file_name = member.rpartition("/")
      match = _PNG_NAME.fullmatch(file_name)
      if parent == folder and match:
        entries.append((int(match[1]), int(match[2]), file_name, member))
    if not entries:
      raise ValueError(
          f"{archive} holds no {folder}/obj<N>__<P>.png files; is it the "
          f"right archive?")
    for object_id, pose, file_name, member in sorted(entries):
      yield file_name, object_id, pose, zf.read(member)

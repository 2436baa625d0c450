"""Flags shared by the experiment scripts: one absl flag per
`configs.Config` field (`--batch_size=500` overrides the preset's value,
an unset flag keeps it), and where the data comes from."""

import dataclasses
import typing

from absl import flags

from ddlsc_tf import configs

FLAGS = flags.FLAGS


def define_data_flags():
  """Defines --data_dir and --manual_dir, as `data.load_images` takes them."""
  flags.DEFINE_string("data_dir", None, "TFDS data directory.")
  flags.DEFINE_string("manual_dir", None,
                      "Folder with the raw dataset archives, for offline use.")


def define_overrides(skip=("dataset",)):
  """Defines a flag (default None) for every Config field not in `skip`."""
  for field in dataclasses.fields(configs.Config):
    if field.name in skip:
      continue
    help_ = f"Override the preset's {field.name}."
    kind = typing.get_args(field.type) or (field.type,)  # Optional[X] → X
    if typing.get_origin(field.type) is tuple:
      flags.DEFINE_list(field.name, None, help_ + " Comma-separated.")
    elif bool in kind:
      flags.DEFINE_bool(field.name, None, help_)
    elif int in kind:
      flags.DEFINE_integer(field.name, None, help_)
    elif float in kind:
      flags.DEFINE_float(field.name, None, help_)
    else:
      flags.DEFINE_string(field.name, None, help_)


def _parse_item(cast, text):
  """One comma-separated item of a list flag; bool("False") would be True."""
  if cast is not bool:
    return cast(text)
  lowered = text.strip().lower()
  if lowered not in ("true", "false", "1", "0"):
    raise ValueError(f"{text!r} is not a boolean (true/false/1/0).")
  return lowered in ("true", "1")


def changes():
  """{Config field: value} for every override flag that is set."""
  result = {}
  for field in dataclasses.fields(configs.Config):
    value = getattr(FLAGS, field.name, None)
    if field.name == "dataset" or value is None:
      continue
    if isinstance(value, list):
      cast = typing.get_args(field.type)[0]  # Tuple[int, ...] → int
      value = tuple(_parse_item(cast, v) for v in value)
    result[field.name] = value
  return result


def resolve(config):
  """`config` with every set override flag applied."""
  return config.replace(**changes())

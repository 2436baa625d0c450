r"""Runs DDLSC on one dataset: `python -m experiments.run --dataset=mnist`.

Every preset field can be overridden by the flag of the same name.
"""

import dataclasses
import typing

from absl import app
from absl import flags
from absl import logging

from ddlsc_tf import configs
from ddlsc_tf import train

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", "mnist", "Preset name (also the dataset).")
flags.DEFINE_string("workdir", None, "Output folder.", required=True)
flags.DEFINE_string("data_dir", None, "TFDS data directory.")
flags.DEFINE_string("manual_dir", None,
                    "Folder with the raw dataset archives, for offline use.")
flags.DEFINE_enum("verbose", "auto", ["auto", "0", "1", "2"],
                  "Keras progress output: 1 a bar, 2 one line per epoch.")
flags.DEFINE_string("init_from", None,
                    "A .keras model saved by an earlier phase to start from "
                    "(needed when --phases does not start with pretrain).")
flags.DEFINE_bool("resume", False,
                  "Continue the run in --workdir from its last checkpoint "
                  "(same flags); starts afresh if it has none.")
flags.DEFINE_bool("overwrite", False,
                  "Delete an earlier run's outputs in --workdir first.")


def _define_overrides():
  """One flag per Config field (except dataset), default None = preset's."""
  for field in dataclasses.fields(configs.Config):
    if field.name == "dataset":
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


_define_overrides()


def _parse_item(cast, text):
  """One comma-separated item of a list flag; bool("False") would be True."""
  if cast is not bool:
    return cast(text)
  lowered = text.strip().lower()
  if lowered not in ("true", "false", "1", "0"):
    raise ValueError(f"{text!r} is not a boolean (true/false/1/0).")
  return lowered in ("true", "1")


def resolve_config():
  config = configs.get_preset(FLAGS.dataset)
  changes = {}
  for field in dataclasses.fields(configs.Config):
    value = getattr(FLAGS, field.name, None)
    if field.name == "dataset" or value is None:
      continue
    if isinstance(value, list):
      cast = typing.get_args(field.type)[0]  # Tuple[int, ...] → int
      value = tuple(_parse_item(cast, v) for v in value)
    changes[field.name] = value
  return config.replace(**changes)


def main(argv):
  del argv
  config = resolve_config()
  logging.info("config: %s", config)
  train.train_and_evaluate(config, FLAGS.workdir, data_dir=FLAGS.data_dir,
                           manual_dir=FLAGS.manual_dir,
                           init_from=FLAGS.init_from,
                           resume=FLAGS.resume, overwrite=FLAGS.overwrite,
                           verbose=(FLAGS.verbose if FLAGS.verbose == "auto"
                                    else int(FLAGS.verbose)))


if __name__ == "__main__":
  app.run(main)

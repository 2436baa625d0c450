"""The training driver: `train_and_evaluate(config, workdir)`.

Loads the data, builds the model, runs the configured phases (Algorithm 1
in `pretrain`, Algorithm 2 in `cluster`) and writes DIR/config.json and
DIR/result.json, each phase's model, the final model, the SavedModel and
the pictures (`workdir` says what a run folder holds).
"""

import os

from absl import logging
import keras
import tensorflow as tf

from ddlsc_tf import checkpoints
from ddlsc_tf import cluster
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import distribute
from ddlsc_tf import evaluation
from ddlsc_tf import model as model_lib
from ddlsc_tf import neighbours
from ddlsc_tf import partitions
from ddlsc_tf import pictures as pictures_lib
from ddlsc_tf import pretrain
from ddlsc_tf import progress
from ddlsc_tf import provenance
from ddlsc_tf import validation
from ddlsc_tf import workdir as workdir_lib

LEARNING_RATE = 1e-3  # Adam's, every phase (ours: the paper gives none)


def build_model(config, input_shape, model_class=model_lib.DDLSC):
  """The `model.DDLSC` (or a subclass) of a config: its network,
  centroids and each phase's loss settings."""
  return model_class(
      input_shape,
      encoder_filters=config.encoder_filters,
      paddings=config.paddings,
      pools=config.pools,
      decoder_filters=config.decoder_filters,
      num_clusters=config.num_clusters,
      pretrain=model_lib.PretrainLoss(
          objective=config.pretrain_loss, knn_k=config.knn_k,
          anchor_fraction=config.anchor_fraction,
          anchor_selection=config.anchor_selection,
          anchor_power=config.anchor_power, lambda_r=config.lambda_r,
          lambda_g=config.lambda_g),
      stage1=model_lib.Stage1Loss(lambda_d=config.lambda_d,
                                  softmax_scale=config.softmax_scale),
      stage2=model_lib.Stage2Loss(
          lambda_w=config.lambda_w, lambda_b=config.lambda_b,
          softmax_scale=(config.softmax_scale
                         if config.cluster2_softmax_scale is None
                         else config.cluster2_softmax_scale)),
      augment=config.augment,
      seed=config.seed)


def compile_model(model):
  """A fresh Adam per phase (built by `DDLSC.compile`, so each phase's
  step is traced once), under the strategy the model was built in. No
  XLA: with op determinism on (every run), Keras refuses jit_compile for
  this model, and on CPU it made the encoder's step 3x slower."""
  with model.distribute_strategy.scope():
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                  jit_compile=False)


def check_phases(phases, init_from):
  """Phases must be consecutive in PHASES order; a run that does not start
  with pre-training must name a saved model to start from."""
  order = list(configs.PHASES)
  unknown = [p for p in phases if p not in order]
  if unknown or not phases:
    raise ValueError(f"unknown phases {unknown or phases}; expected "
                     f"consecutive names from {order}.")
  first = order.index(phases[0])
  if list(phases) != order[first:first + len(phases)]:
    raise ValueError(f"phases {list(phases)} must be consecutive, in the "
                     f"order {order}.")
  if first > 0 and init_from is None:
    raise ValueError(
        f"phases start at {phases[0]!r}: pass the model saved by an earlier "
        f"phase (init_from=WORKDIR/{order[first - 1]}.keras).")


def check_config_for_data(config, num_examples):
  """What only the data's size can tell, checked before any training."""
  if num_examples < 1:
    raise ValueError("the dataset is empty: no images to cluster.")
  if config.batch_size > num_examples:
    raise ValueError(
        f"batch_size {config.batch_size} is larger than the dataset "
        f"({num_examples} images); use a batch_size <= {num_examples}.")
  if config.num_clusters > num_examples:
    raise ValueError(
        f"num_clusters {config.num_clusters} is more than the "
        f"{num_examples} images to cluster.")
  if config.cluster_init == "spectral" and (
      partitions.SPECTRAL_NEIGHBOURS >= num_examples):
    raise ValueError(
        f"the spectral start needs more than "
        f"{partitions.SPECTRAL_NEIGHBOURS} images; the data has "
        f"{num_examples}. Use cluster_init='kmeans'.")
  if (config.cluster2_assignment == "balanced"
      and num_examples > partitions.MAX_BALANCED_POINTS):
    raise ValueError(
        f"cluster2_assignment='balanced' works on up to "
        f"{partitions.MAX_BALANCED_POINTS} images (an exact assignment); "
        f"the data has {num_examples}. Use 'nearest' or 'refresh'.")


def _load_start_weights(model, init_from):
  # Weights only: the hyper-parameters are this run's config, not the
  # saved model's, so flags given with --init_from take effect.
  checkpoints.check_keras_file(init_from, "init_from")
  try:
    model.load_weights(init_from)
  except (ValueError, KeyError) as e:
    raise ValueError(
        f"cannot start from {init_from!r}: its weights do not fit the "
        f"network of this config ({e}).") from e


def check_start(config, image_shape, *, init_from=None):
  """Builds the network once and loads init_from's weights into it, so a
  network the config cannot build, or a start it cannot take, fails
  before the workdir (and an earlier run in it) is touched."""
  model = build_model(config, tuple(image_shape))
  if init_from is not None:
    _load_start_weights(model, init_from)
  del model


def _log_hparams(workdir, config):
  """The run's config in TensorBoard's HPARAMS tab."""
  from tensorboard.plugins.hparams import api as hp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  values = {k: (v if isinstance(v, (bool, int, float, str)) else str(v))
            for k, v in config.to_dict().items()}
  with tf.summary.create_file_writer(os.path.join(workdir, "tb")).as_default():
    hp.hparams(values)


def train_and_evaluate(config, workdir, *, data_dir=None, manual_dir=None,
                       init_from=None, verbose="auto",
                       resume=False, overwrite=False, pictures=True,
                       size_to_data=False, fixed=(), strategy=None,
                       enlarge_by=1):
  """Runs `config.phases` on the config's dataset into `workdir`.

  Args:
    config: a `configs.Config`.
    workdir: output folder (created).
    data_dir: TFDS data directory.
    manual_dir: TFDS manual_dir for offline preparation.
    init_from: a saved .keras model to start from instead of a fresh one.
    verbose: Keras `fit` verbosity; "auto": a progress bar on a terminal,
      one line per epoch when the output goes to a file or pipe.
    resume: continue the run in workdir from its last checkpoint (the
      config must be the same); starts afresh when there is none.
    overwrite: delete an earlier run's outputs in workdir first.
    pictures: draw each phase's t-SNE and confusion pictures.
    size_to_data: size the batch to the data (`configs.sized_to_data`),
      but for the fields named in `fixed` (the user's).
    fixed: the config fields the user set, which neither `size_to_data`
      nor `decide_from_data` changes.
    strategy: a tf.distribute strategy to train under
      (`distribute.make_strategy`); None: the default, one device. Under
      several workers only the chief writes to workdir.
    enlarge_by: for scale checks, the data this many times over
      (`augment.enlarge`: the images, then random affine copies).

  Returns:
    The result dict written to DIR/result.json.

  Raises:
    FileExistsError: workdir holds a run and neither resume nor overwrite.
    ValueError: a config that does not fit the data, or a resume with a
      different config.
  """
  workdir_lib.check_workdir(workdir)
  check_phases(config.phases, init_from)
  strategy = strategy or tf.distribute.get_strategy()
  with distribute.own_workdir(strategy, workdir, resume=resume) as workdir, \
      workdir_lib.Lock(workdir):  # one writer per workdir, from the start
    # Data first: a config that does not fit it fails before the workdir
    # (and an earlier run in it) is touched.
    images, labels = data.load_for(config, data_dir=data_dir,
                                   manual_dir=manual_dir,
                                   enlarge_by=enlarge_by)
    if size_to_data:
      config = configs.sized_to_data(
          config, len(images), **{k: getattr(config, k) for k in fixed})
    logging.info("config: %s", config)
    check_config_for_data(config, len(images))
    distribute.check_batch(strategy, config.batch_size)
    # A resumed run with a checkpoint starts from it, not from init_from.
    saved = (checkpoints.load_state(os.path.join(workdir, "checkpoint"))
             if resume else None)
    check_start(config, images.shape[1:],
                init_from=None if saved else init_from)
    refusal = None
    try:
      workdir_lib.prepare_workdir(workdir, config, resume=resume,
                                  overwrite=overwrite, init_from=init_from)
    except (FileExistsError, ValueError) as e:
      refusal = e
    distribute.check_workers_agree(
        strategy, refused=refusal is not None,
        checkpoint=saved["checkpoint"] if saved else 0)
    if refusal is not None:
      raise refusal
    # The run keeps one tensor copy of the images; the NumPy one goes.
    images = data.as_tensor(images)
    _, result = run_phases(config, images, labels, workdir,
                           init_from=init_from, verbose=verbose,
                           resume=resume, fixed=fixed,
                           # Another worker's pictures would be dropped.
                           pictures=pictures and distribute.is_chief(strategy),
                           strategy=strategy)
  return result


def _start_phase(model, phase, run, resume_state):
  """Compiles for `phase`; restores its checkpoint when resuming inside it
  (returning the checkpoint's S, or None)."""
  model.phase = phase
  compile_model(model)
  if resume_state is None:
    return None
  assignments = run.checkpointer.restore(model, resume_state)
  logging.info("%s: resuming after epoch %d", phase, resume_state["epoch"])
  return assignments


def _run_phase(model, images, labels, config, run, phase, resume_state):
  assignments = _start_phase(model, phase, run, resume_state)
  if phase == "pretrain":
    return pretrain.pretrain(model, images, labels, config, run,
                             resume_state=resume_state)
  return cluster.cluster_stage(model, images, labels, config, run, phase,
                               resume_state=resume_state,
                               assignments=assignments)


def decide_from_data(config, tables, num_examples, *, fixed=()):
  """(config, choice): a config that leaves anchor_groups to the data
  (None, the general recipe's) with configs.CHAINS (over
  CHAINS_BALANCED_POINTS images CHAINS_MANY) applied when the images come
  in chains (`neighbours.Tables.chains`), anchor_groups off when not,
  except for the fields named in `fixed` (the user's, which stay); choice
  is result.json's record of it (None when nothing was left)."""
  if config.anchor_groups is not None:
    return config, None
  chains, why = tables.chains(config.num_clusters)
  changes = dict(configs.CHAINS) if chains else {"anchor_groups": False}
  if chains and num_examples > configs.CHAINS_BALANCED_POINTS:
    changes = dict(configs.CHAINS_MANY)
    why += (f"; over {configs.CHAINS_BALANCED_POINTS} images: a spectral "
            f"start and a new partition every iteration, not equal sizes")
  # anchor_groups set to None is the user leaving it to the data.
  kept = sorted((set(changes) & set(fixed)) - {"anchor_groups"})
  changes = {k: v for k, v in changes.items() if k not in kept}
  choice = {"chains": chains, "why": why, "changes": changes}
  if kept:
    choice["kept_as_set"] = kept
  logging.info("decided from the data: %s (%s)%s", changes, why,
               f"; kept as set: {kept}" if kept else "")
  return config.replace(**changes), choice


def run_phases(config, images, labels, workdir, *, init_from=None,
               verbose="auto", resume=False, pictures=True, fixed=(),
               strategy=None):
  """`train_and_evaluate` on images already in memory (the estimator's).

  Args:
    config: a `configs.Config`.
    images: [N, H, W, C] float32 in [0, 1].
    labels: [N] int labels for ACC/NMI/ARI only, or None.
    workdir: an existing folder for checkpoints and outputs.
    init_from, verbose, resume, pictures, fixed, strategy: as
      `train_and_evaluate`.

  Returns:
    (the trained model, the result dict written to DIR/result.json).
  """
  verbose = progress.fit_verbosity(verbose)
  checked = validation.check_images(images)  # a view of a float32 tensor
  if not (isinstance(images, tf.Tensor) and images.dtype == tf.float32
          and tuple(images.shape) == checked.shape):
    images = data.as_tensor(checked)  # one copy shared by every phase
  del checked
  labels = validation.check_labels(labels, len(images))
  check_phases(config.phases, init_from)
  check_config_for_data(config, len(images))
  logging.info("%s: %d images of shape %s", config.dataset, len(images),
               images.shape[1:])

  # Seeded after loading: preparing a TFDS dataset the first time draws
  # from the global RNGs, which would make a first run differ from a rerun.
  provenance.seed_everything(config.seed)
  strategy = strategy or tf.distribute.get_strategy()
  distribute.check_batch(strategy, config.batch_size)
  with strategy.scope():  # its variables mirrored on every replica
    model = build_model(config, images.shape[1:])
  checkpointer = checkpoints.Checkpointer(os.path.join(workdir, "checkpoint"))
  state = checkpointer.load() if resume else None
  if state is None and init_from is not None:
    _load_start_weights(model, init_from)
    logging.info("starting from the weights of %s", init_from)
  params = int(model.autoencoder_params)
  logging.info("model: latent d=%d, %d parameters (encoder %d, decoder %d)",
               model.latent_dim, params, model.encoder.count_params(),
               model.decoder.count_params())

  fingerprint = data.fingerprint(images, labels)
  if state is None:
    result = {"dataset": config.dataset, "seed": config.seed,
              "num_examples": int(len(images)), "params": params,
              "latent_dim": model.latent_dim, "init_from": init_from,
              "environment": provenance.environment(), "phases": {}}
    done = []
  else:
    result, done = state["result"], state["done"]
    if result["num_examples"] != len(images):
      raise ValueError(
          f"cannot resume the run in {workdir}: it trained on "
          f"{result['num_examples']} images, the data now has {len(images)}."
          f" Resume on the same data, or overwrite the run.")
    if state.get("data") != fingerprint:
      raise ValueError(
          f"cannot resume the run in {workdir}: its images (or labels) "
          f"differ from those it trained on, though there are as many. "
          f"Resume on the same data, or overwrite the run.")
    if state.get("phase") is None:  # saved at a phase boundary
      checkpointer.restore(model, state)
    logging.info("resuming %s: phases done %s", workdir, done)
  run = workdir_lib.Run(model, workdir, verbose=verbose,
                        checkpointer=checkpointer, result=result, done=done,
                        tables=neighbours.Tables(
                            images, k=config.knn_k,
                            folder=checkpointer.folder,
                            fingerprint=fingerprint),
                        data=fingerprint)
  if state is None:
    _log_hparams(workdir, config)
  config, choice = decide_from_data(config, run.tables, len(images),
                                    fixed=fixed)
  if choice:
    result["decided_from_data"] = choice
  with run.stop_on_sigterm():
    _run_all(model, images, labels, config, run, state, pictures)
    if not cluster.centroids_initialised(model):
      # Pre-training only: the exported model's centroids come from the
      # config's start on the plain latent (k-means: the partition its
      # evaluation scored, under plain_* when that averages copies).
      cluster.start_partition(model, images, config)
    if labels is not None:
      # What the saved model predicts: the last phase's S can be a vote, or
      # one centroid update (Algorithm 2's last step) away from it.
      result["final"] = evaluation.model_scores(model, images, labels)
      checkpoints.write_json_atomic(os.path.join(workdir, "result.json"),
                                    result)
    # A stop asked for now waits for these writes; the run is then done.
    checkpoints.save_model_atomic(model,
                                  os.path.join(workdir, "model.keras"))
    checkpoints.export_atomic(model, os.path.join(workdir, "export"))
  logging.info("saved %s/model.keras and the SavedModel %s/export",
               workdir, workdir)
  return model, result


def _run_all(model, images, labels, config, run, state, pictures):
  """Runs the phases not done yet; after each, saves its model,
  result.json and a checkpoint at the phase boundary."""
  result, workdir = run.result, run.workdir
  for phase in config.phases:
    if phase in run.done:
      continue
    inside = state if state and state.get("phase") == phase else None
    result["phases"][phase] = _run_phase(model, images, labels, config, run,
                                         phase, inside)
    if config.recalibrate_batch_norm:  # the saved model's, whatever ran last
      model.recalibrate_batch_norm(images, batch_size=config.batch_size,
                                   seed=config.seed)
    last = result["phases"][phase]
    result["final"] = {k: last[k] for k in ("acc", "nmi", "ari")}
    run.done.append(phase)
    if pictures:
      pictures_lib.save_pictures(model, images, labels, config, workdir,
                                 phase, last)
    checkpoints.save_model_atomic(model,
                                  os.path.join(workdir, f"{phase}.keras"))
    checkpoints.write_json_atomic(os.path.join(workdir, "result.json"), result)
    run.save({"phase": None})
    run.check_stop()

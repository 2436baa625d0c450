"""Algorithm 1: pre-training the auto-encoder on eq. 6.

For every epoch, for every batch B: the kNN graph of B's raw images, its
anchor pairs 𝒜_B, then one Adam step on L_d(Z) + λ L_r(X, X̂)
(`DDLSC._pretrain_step`), for `pretrain_epochs` epochs: the paper gives
no ε for Algorithm 1's stop on L_d, and its runs count epochs (section
4.2). Every `eval_every` epochs the latent is clustered by k-means and
scored (a subsample until the last epoch).
"""

import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import data
from ddlsc_tf import evaluation


# Progress scores before the last epoch's: k-means of the plain latent of
# at most this many evenly spaced images (the full score is the last's).
PROGRESS_IMAGES = 10000


class EvaluationCallback(keras.callbacks.Callback):
  """Every `eval_every` epochs scores the latent into the epoch logs, so the
  TensorBoard callback after it records them, and keeps a history: before
  the last epoch a progress score (PROGRESS_IMAGES, no copies), after it
  `evaluation.evaluate` of the whole data; each entry says how many images
  it scored and how many copies their latent averaged. `history` and
  `seconds_before` carry a resumed phase's earlier part."""

  def __init__(self, images, labels, config, *, epochs, history=(),
               seconds_before=0.0):
    super().__init__()
    self.images, self.labels, self.config = images, labels, config
    self.epochs = epochs
    self.history = list(history)
    self.seconds_before = seconds_before
    self._start = None
    # The progress subsample, gathered once for every evaluation.
    self._progress = (images, labels)
    if labels is not None and len(images) > PROGRESS_IMAGES:
      keep = np.linspace(0, len(images) - 1, PROGRESS_IMAGES).round().astype(
          np.int64)
      self._progress = (tf.gather(images, keep), labels[keep])

  def on_train_begin(self, logs=None):
    self._start = time.time()

  def seconds(self):
    return self.seconds_before + time.time() - self._start

  def on_epoch_end(self, epoch, logs=None):
    done = epoch + 1
    last = done == self.epochs
    if self.labels is None or (done % self.config.eval_every and not last):
      return
    seconds = self.seconds()
    images, labels, config = ((self.images, self.labels, self.config) if last
                              else (*self._progress,
                                    self.config.replace(embed_copies=0)))
    scores = evaluation.evaluate(self.model, images, labels, config)
    # Which measure: the progress scores and the last one differ in both.
    self.history.append({"epoch": done, "seconds": round(seconds, 2),
                         "images": int(len(labels)),
                         "copies": config.embed_copies, **scores})
    plain = ("" if "plain_acc" not in scores else
             " (plain latent: acc=%.4f nmi=%.4f ari=%.4f)" % tuple(
                 scores[f"plain_{k}"] for k in ("acc", "nmi", "ari")))
    logging.info("pretrain epoch %d: acc=%.4f nmi=%.4f ari=%.4f%s (%.0f s)",
                 done, scores["acc"], scores["nmi"], scores["ari"], plain,
                 seconds)
    if logs is not None:
      logs.update({f"eval/{k}": v for k, v in scores.items()})


class EpochEnd(keras.callbacks.Callback):
  """Calls `fn(epochs_done)` after every epoch (the checkpoint)."""

  def __init__(self, fn):
    super().__init__()
    self.fn = fn

  def on_epoch_end(self, epoch, logs=None):
    self.fn(epoch + 1)


def phase_result(history, epochs, seconds):
  """A phase's entry of result.json: acc/nmi/ari of its last evaluation
  (None without labels), the plain latent's where it has them, and the
  history."""
  final = history[-1] if history else {}
  plain = {k: final[k] for k in ("plain_acc", "plain_nmi", "plain_ari")
           if k in final}
  return {"epochs": epochs, "seconds": round(seconds, 2),
          **{k: final.get(k) for k in ("acc", "nmi", "ari")}, **plain,
          "history": history}


def batches(images, labels, config, tables, *, first_epoch, epochs):
  """Pre-training's (dataset, steps_per_epoch) for epochs [first_epoch,
  epochs): shuffled batches, grouped by `tables`' neighbours and anchor
  groups where the config asks for them (`data.train_dataset`)."""
  return data.train_dataset(
      images, labels, batch_size=config.batch_size, seed=config.seed,
      first_epoch=first_epoch, epochs=epochs,
      groups=(tables.groups(config.num_clusters)
              if config.anchor_groups else None),
      neighbours=tables.raw() if config.batch_neighbours else None,
      neighbours_per_seed=config.batch_neighbours)


def pretrain(model, images, labels, config, run, resume_state=None):
  """Algorithm 1 on `images` ([N, H, W, C] tensor); labels only score.

  Args:
    model: a `model.DDLSC` compiled for "pretrain".
    images, labels: the data (labels [N] or None).
    config: a `configs.Config`.
    run: the `workdir.Run` (checkpoints, TensorBoard, neighbour tables).
    resume_state: the checkpoint's state when resuming inside this phase.

  Returns:
    The phase's result (`phase_result`).
  """
  s = resume_state or {"epoch": 0, "history": [], "seconds": 0.0}
  evaluation_cb = EvaluationCallback(
      images, labels, config, epochs=config.pretrain_epochs,
      history=s["history"], seconds_before=s["seconds"])
  if s["epoch"] >= config.pretrain_epochs:
    return phase_result(evaluation_cb.history, s["epoch"], s["seconds"])
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=run.tensorboard_dir("pretrain"), write_graph=False)

  def checkpoint(done):
    run.save_epoch({"phase": "pretrain", "epoch": done,
                    "history": evaluation_cb.history,
                    "seconds": evaluation_cb.seconds()})

  # The checkpoint after the evaluation, so it saves the epoch's score.
  callbacks = [evaluation_cb, tensorboard, EpochEnd(checkpoint),
               run.stop_callback()]
  dataset, steps = batches(images, labels, config, run.tables,
                           first_epoch=s["epoch"],
                           epochs=config.pretrain_epochs)
  model.fit(dataset, steps_per_epoch=steps, initial_epoch=s["epoch"],
            epochs=config.pretrain_epochs, callbacks=callbacks,
            verbose=run.verbose, shuffle=False)  # the batches' own order
  # fit ran every epoch: a requested stop raises (`Run.check_stop`).
  return phase_result(evaluation_cb.history, config.pretrain_epochs,
                      evaluation_cb.seconds())

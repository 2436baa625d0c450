"""Algorithm 2: the clustering phase on the unit sphere, stages I and II.

Start: centroids μ from a partition of the pre-trained latent (k-means, or
spectral clustering). Then each outer iteration of a stage:

  1. S: each image's cluster, from the whole latent (by the stage's
     `Assignment` rule; the paper's is the nearest centroid);
  2. μ: each cluster's normalised mean (eq. 7's maximiser for fixed S);
  3. L_c (eq. 7) and the scores; stop when L_c moves less than the
     tolerance, or after the stage's iterations;
  4. a few epochs on θ with S and μ fixed: stage I on eq. 8
     (−L_c + λ_d L_d + λ_r L_r, λ_d scheduled down to 1), stage II on
     eq. 11 (−L_c − λ_w L_w + λ_b L_b + λ_r L_r).

A checkpoint at epoch ends (`workdir.Run.save_epoch`) holds S, so a resumed
iteration trains on the assignments it started with.
"""

import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import evaluation
from ddlsc_tf import losses
from ddlsc_tf import metrics
from ddlsc_tf import partitions
from ddlsc_tf import pretrain as pretrain_lib

# Epochs on θ per outer iteration, at least (ours).
EPOCHS_PER_ITERATION = 2


def start_partition(model, images, config, z=None):
  """Algorithm 2's start: a partition of the whole unit latent (`z` when
  the caller has it) by `config.cluster_init`, k-means or spectral
  clustering; sets the model's centroids and returns S, [N] int."""
  z = evaluation.embed(model, images, config, phase="cluster1") if (
      z is None) else z
  if config.cluster_init == "spectral":
    assignments, centroids = partitions.spectral_on_sphere(
        z, num_clusters=config.num_clusters, seed=config.seed)
  else:
    assignments, centroids = evaluation.kmeans(z, config)
  model.centroids.assign(centroids)
  return assignments


def centroids_initialised(model):
  return bool(np.any(model.centroids.numpy()))


class Assignment:
  """How a stage chooses S in each outer iteration: the nearest centroid
  (Algorithm 2), smoothed by the kNN vote when the config sets one.

  Subclasses change the start or the choice; `refreshes` says that S is a
  new partition each iteration, whose L_c is not comparable with the last
  one's (the stage then runs all its iterations).
  """
  refreshes = False

  def __init__(self, model, images, config, run, phase):
    self.model, self.images, self.config = model, images, config
    self.run, self.phase = run, phase
    self.pending = None  # an S chosen before the iteration asks for one

  def needs_start(self):
    """Whether the stage starts from a new partition of the latent."""
    return not centroids_initialised(self.model)

  def start(self):
    z = evaluation.embed(self.model, self.images, self.config,
                         phase="cluster1")
    partition = start_partition(self.model, self.images, self.config, z=z)
    if self.config.cluster_init == "spectral":
      self.pending = self.vote(partition, z, 0)

  def resume(self, assignments):
    """Resuming inside the stage with the checkpoint's S."""
    del assignments

  def vote(self, assignments, z=None, iteration=None):
    """S smoothed by the raw images' neighbours; in stage II also by z's
    from iteration `vote_latent_from` on."""
    c = self.config
    latent = (self.phase == "cluster2" and c.vote_latent_from is not None
              and iteration is not None and iteration >= c.vote_latent_from)
    return self.run.tables.vote(assignments, num_clusters=c.num_clusters,
                                rounds=c.vote_rounds,
                                z=z if latent else None)

  def nearest(self, z, iteration, balanced=False):
    """The nearest centroid (with `balanced`, under equal cluster sizes,
    moving the centroids), voted."""
    if balanced:
      nearest, centroids = partitions.balanced_kmeans_on_sphere(
          z, self.model.centroids.numpy())
      self.model.centroids.assign(centroids)
    else:
      nearest = losses.assign_clusters(z, self.model.centroids).numpy()
    return self.vote(nearest, z, iteration)

  def choose(self, z, iteration):
    """S for this iteration, from the latent z of every image."""
    if self.pending is not None:
      s, self.pending = self.pending, None
      return s
    return self.nearest(z, iteration)

  def scored_as(self, iteration):
    """The key under which the phase's result keeps the history's score of
    the partition θ trained on, when it is not the nearest centroid's."""
    del iteration
    return "voted_partition" if self.config.vote_rounds else None


class Held(Assignment):
  """Stage I from a spectral start: S is the spectral partition of the
  latent, made anew every iteration, since nearest-centroid steps on a
  latent that is not yet compact cut its elongated clusters."""
  refreshes = True

  def needs_start(self):
    return True

  def resume(self, assignments):
    self.pending = assignments  # the checkpoint's S is the held one

  def choose(self, z, iteration):
    if iteration > 0:
      self.pending = self.vote(start_partition(self.model, self.images,
                                               self.config, z=z))
    return self.pending  # kept until the next iteration replaces it

  def scored_as(self, iteration):
    return "held_partition"


class Balanced(Assignment):
  """Stage II from a new start partition, then equal-size clusters from
  the second iteration on (objects of equal counts)."""

  def needs_start(self):
    return True

  def choose(self, z, iteration):
    if iteration < 1:
      return super().choose(z, iteration)
    self.pending = None  # equal sizes replace a new partition
    return self.nearest(z, iteration, balanced=True)

  def scored_as(self, iteration):
    return "balanced_partition" if iteration >= 1 else (
        super().scored_as(iteration))


class Refresh(Assignment):
  """Stage II's S is a new partition of the latent every iteration."""
  refreshes = True

  def needs_start(self):
    return True

  def choose(self, z, iteration):
    if iteration > 0:
      self.pending = self.vote(start_partition(self.model, self.images,
                                               self.config, z=z),
                               z, iteration)
    return super().choose(z, iteration)

  def scored_as(self, iteration):
    return "refreshed_partition"


def assignment(model, images, config, run, phase):
  """The stage's rule for S, picked once from the config."""
  if phase == "cluster1":
    kind = Held if config.cluster_init == "spectral" else Assignment
  else:
    kind = {"nearest": Assignment, "balanced": Balanced,
            "refresh": Refresh}[config.cluster2_assignment]
  return kind(model, images, config, run, phase)


def lambda_d(config, iteration, iterations):
  """Stage I's λ_d, linear from `config.lambda_d` down to 1 over its outer
  iterations (COIL: "set to 4 and decreased to 1", section 4.3)."""
  fraction = min(iteration / max(iterations - 1, 1), 1.0)
  return config.lambda_d + fraction * (1.0 - config.lambda_d)


def cluster_stage(model, images, labels, config, run, phase, resume_state=None,
                  assignments=None):
  """Stage I (phase "cluster1", eq. 8) or stage II ("cluster2", eq. 11).

  Args:
    model: a `model.DDLSC` compiled for `phase`.
    images, labels: the data (labels [N] or None, only to score).
    config: a `configs.Config`.
    run: the `workdir.Run`.
    phase: "cluster1" or "cluster2".
    resume_state: the checkpoint's state when resuming inside this phase.
    assignments: the checkpoint's S when resuming.

  Returns:
    The phase's result: the scores of the last S (without a vote, the
    nearest centroid before the last centroid update: Algorithm 2's output)
    or, when θ trained on another S, the model's nearest-centroid scores
    with that S's under `Assignment.scored_as`; the history of every outer
    iteration.
  """
  c = config
  stage1 = phase == "cluster1"
  iterations = c.cluster1_iterations if stage1 else c.cluster2_iterations
  tolerance = (c.cluster2_tolerance if not stage1
               and c.cluster2_tolerance is not None else c.cluster_tolerance)
  seed = c.seed + configs.PHASES.index(phase)
  steps_per_epoch = len(images) // c.batch_size
  epochs_per_iteration = max(EPOCHS_PER_ITERATION,
                             -(-c.min_steps_per_iteration // steps_per_epoch))
  rule = assignment(model, images, c, run, phase)
  if resume_state is None and rule.needs_start():
    rule.start()
  elif resume_state is not None:
    rule.resume(assignments)
  tensorboard = keras.callbacks.TensorBoard(log_dir=run.tensorboard_dir(phase),
                                            write_graph=False)
  writer = tf.summary.create_file_writer(run.tensorboard_dir(phase, "eval"))
  s = resume_state or {"iteration": 0, "epoch": 0, "iteration_end": 0,
                       "previous_l_c": None, "history": [], "seconds": 0.0}
  iteration, epoch, history = s["iteration"], s["epoch"], s["history"]
  previous_l_c, iteration_end = s["previous_l_c"], s["iteration_end"]
  pending = resume_state is not None and epoch < iteration_end
  if resume_state is not None and not pending:
    iteration += 1  # the checkpoint ended that iteration's last epoch
  start = time.time() - s["seconds"]

  def checkpoint(epochs_done):
    run.save_epoch({"phase": phase, "iteration": iteration,
                    "epoch": epochs_done, "iteration_end": iteration_end,
                    "previous_l_c": previous_l_c, "history": history,
                    "seconds": time.time() - start}, assignments=assignments)

  try:
    while True:
      if stage1:
        model.lambda_d.assign(lambda_d(c, iteration, iterations))
      if not pending:
        z = evaluation.embed(model, images, c, phase=phase)
        assignments = rule.choose(z, iteration)              # S
        model.centroids.assign(losses.update_centroids(     # μ
            z, assignments, model.centroids))
        l_c = float(losses.clustering_objective(
            z=z, centroids=model.centroids, assignments=assignments))
        scores = ({} if labels is None
                  else metrics.clustering_scores(labels, assignments))
        history.append({"iteration": iteration, "epoch": epoch, "l_c": l_c,
                        "seconds": round(time.time() - start, 2), **scores})
        logging.info("%s iteration %d (epoch %d): L_c=%.4f %s(%.0f s)",
                     phase, iteration, epoch, l_c,
                     "".join(f"{k}={v:.4f} " for k, v in scores.items()),
                     time.time() - start)
        with writer.as_default(step=epoch):
          for key in ("l_c", *scores):
            tf.summary.scalar(f"eval/{key}", history[-1][key])
        converged = (previous_l_c is not None and not rule.refreshes
                     and abs(l_c - previous_l_c) < tolerance)
        if iteration == iterations or converged:
          break
        previous_l_c = l_c
        iteration_end = epoch + epochs_per_iteration
      pending = False
      # Stage I's batches group neighbours as pre-training's; stage II's
      # are plain.
      grouped = stage1 and c.batch_neighbours
      dataset, steps = data.train_dataset(
          images, labels, batch_size=c.batch_size, seed=seed,
          assignments=assignments.astype(np.int32), first_epoch=epoch,
          epochs=iteration_end,
          neighbours=run.tables.raw() if grouped else None,
          neighbours_per_seed=c.batch_neighbours if grouped else 0)
      model.fit(dataset, steps_per_epoch=steps, initial_epoch=epoch,
                epochs=iteration_end,
                callbacks=[tensorboard, pretrain_lib.EpochEnd(checkpoint),
                           run.stop_callback()],
                verbose=run.verbose, shuffle=False)  # the batches' own order
      epoch = iteration_end
      iteration += 1
  finally:
    writer.close()
  result = pretrain_lib.phase_result(history, epoch, time.time() - start)
  key = rule.scored_as(history[-1]["iteration"])
  if key is not None and labels is not None:
    # The last iteration's z: θ has not moved since it was embedded.
    predicted = losses.assign_clusters(z, model.centroids).numpy()
    result[key] = {k: result[k] for k in ("acc", "nmi", "ari")}
    result.update(metrics.clustering_scores(labels, predicted))
    logging.info("%s: the %s scored %s; nearest centroid %s", phase,
                 key.replace("_", " "), result[key],
                 {k: round(result[k], 4) for k in ("acc", "nmi", "ari")})
  return result

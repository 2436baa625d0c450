"""Whole-data neighbour tables, anchor groups and the tables a run keeps,
against brute-force NumPy references."""

import numpy as np
import pytest
from sklearn import neighbors as sk_neighbors
import tensorflow as tf

from ddlsc_tf import neighbours


def _cosine_neighbours(features, k):
  f = features / np.linalg.norm(features, axis=1, keepdims=True)
  s = f @ f.T
  np.fill_diagonal(s, -np.inf)
  return np.argsort(-s, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("as_tensor", [False, True])
def test_neighbour_table_is_the_brute_force_knn(as_tensor):
  rng = np.random.default_rng(0)
  x = rng.random((130, 8, 8, 1)).astype(np.float32)
  table = neighbours.neighbour_table(tf.constant(x) if as_tensor else x, k=4,
                                     chunk=32)
  assert table.shape == (130, 4) and table.dtype == np.int32
  np.testing.assert_array_equal(table,
                                _cosine_neighbours(x.reshape(130, -1), 4))
  assert not (table == np.arange(130)[:, None]).any()


def test_neighbour_table_rejects_a_k_it_cannot_fill():
  with pytest.raises(ValueError, match="1 <= k < N"):
    neighbours.neighbour_table(np.zeros((5, 4, 4, 1), np.float32), k=5)


def _translated(image, dy, dx):
  """image [H, W, C] moved down dy and right dx pixels, zeros shifted in."""
  h, w = image.shape[:2]
  out = np.zeros_like(image)
  out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = (
      image[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)])
  return out


def test_shifted_cosines_is_the_best_cosine_over_translations():
  rng = np.random.default_rng(4)
  x = rng.random((12, 7, 6, 2)).astype(np.float32)
  cand = rng.integers(0, 12, size=(5, 3))
  got = neighbours.shifted_cosines(x, cand, start=4, shift=2)
  unit = lambda v: v.ravel() / np.linalg.norm(v)
  want = np.array([[max(unit(x[4 + r]) @ unit(_translated(x[j], dy, dx))
                        for dy in range(-2, 3) for dx in range(-2, 3))
                    for j in row] for r, row in enumerate(cand)])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  plain = neighbours.shifted_cosines(x, cand, start=4, shift=0)
  np.testing.assert_allclose(
      plain, [[unit(x[4 + r]) @ unit(x[j]) for j in row]
              for r, row in enumerate(cand)], rtol=1e-5)


def test_neighbour_table_with_shift_finds_a_translated_copy():
  rng = np.random.default_rng(5)
  x = (rng.random((30, 12, 12, 1)) < 0.15).astype(np.float32)
  x[0, :, -1] = 0.0  # so moving it one pixel right loses nothing
  x[1] = _translated(x[0], 0, 1)
  x[2] = np.clip(x[0] + (rng.random(x[0].shape) < 0.1), 0, 1)  # noisy
  plain = neighbours.neighbour_table(x, k=3)
  shifted = neighbours.neighbour_table(x, k=3, shift=1, candidates=29)
  assert plain[0, 0] == 2 and shifted[0, 0] == 1
  assert shifted.shape == (30, 3) and shifted.dtype == np.int32
  assert not (shifted == np.arange(30)[:, None]).any()
  # Re-ranking only reorders the candidates it was given.
  few = neighbours.neighbour_table(x, k=3, shift=1, candidates=5)
  pool = neighbours.neighbour_table(x, k=5)
  assert all(set(f) <= set(p) for f, p in zip(few, pool))
  with pytest.raises(ValueError, match="shift must be >= 0"):
    neighbours.neighbour_table(x, k=3, shift=-1)
  with pytest.raises(ValueError, match="candidates"):
    neighbours.neighbour_table(x, k=3, shift=1, candidates=2)


def test_neighbour_table_never_lists_an_image_as_its_own_duplicate():
  rng = np.random.default_rng(2)
  x = rng.random((40, 5, 5, 1)).astype(np.float32)
  x[7] = x[3]  # exact duplicates tie with the image itself
  x[20] = x[3]
  table = neighbours.neighbour_table(x, k=3, chunk=16)
  assert not (table == np.arange(40)[:, None]).any()
  assert set(table[3][:2]) == {7, 20}
  assert set(table[7][:2]) == {3, 20}


def _anchor_groups_ref(table, max_size):
  """Plain reading: mutual pairs by (larger rank, smaller rank, i, j), a
  merge kept while the union has at most max_size images."""
  n, _ = table.shape
  rank = {(i, int(j)): r for i in range(n) for r, j in enumerate(table[i])}
  pairs = sorted((max(r, rank[j, i]), min(r, rank[j, i]), i, j)
                 for (i, j), r in rank.items() if i < j and (j, i) in rank)
  group = list(range(n))
  for *_, i, j in pairs:
    a, b = group[i], group[j]
    if a != b and group.count(a) + group.count(b) <= max_size:
      group = [a if g == b else g for g in group]
  return group


@pytest.mark.parametrize("max_size", [1, 3, 8, 200])
def test_anchor_groups_match_a_plain_single_linkage(max_size):
  rng = np.random.default_rng(5)
  x = rng.random((60, 4, 4, 1)).astype(np.float32)
  table = neighbours.neighbour_table(x, k=4)
  got = neighbours.anchor_groups(table, max_size=max_size)
  want = _anchor_groups_ref(table, max_size)
  assert got.dtype == np.int32 and got.shape == (60,)
  # The same partition (ids may differ), none over the cap.
  pairs = lambda g: {(i, j) for i in range(60) for j in range(60)
                     if g[i] == g[j]}
  assert pairs(got) == pairs(want)
  assert np.bincount(got).max() <= max_size
  # Ids number the groups by their first image: 0, 1, ... in order.
  _, first = np.unique(got, return_index=True)
  np.testing.assert_array_equal(got[np.sort(first)], np.arange(got.max() + 1))
  if max_size == 1:
    assert len(set(got)) == 60


def test_anchor_groups_span_chains_and_stop_at_the_cap():
  # Two chains of 6 points on separate lines, each point's nearest the
  # next: every chain ends in one group and the chains never join; with a
  # cap of 3 each chain is cut into groups of at most 3.
  angles = np.concatenate([np.linspace(0.0, 0.5, 6),
                           np.linspace(1.2, 1.7, 6)])
  x = np.stack([np.cos(angles), np.sin(angles)], 1).reshape(12, 1, 1, 2)
  x = (x + 2.0).astype(np.float32)  # positive, as pixels
  table = neighbours.neighbour_table(x, k=2)
  groups = neighbours.anchor_groups(table, max_size=6)
  assert len(set(groups[:6])) == 1 and len(set(groups[6:])) == 1
  assert groups[0] != groups[6]
  capped = neighbours.anchor_groups(table, max_size=3)
  assert np.bincount(capped).max() <= 3 and len(set(capped)) >= 4
  with pytest.raises(ValueError, match="max_size"):
    neighbours.anchor_groups(table, max_size=0)


def test_tables_compute_each_table_once_and_vote_on_them():
  rng = np.random.default_rng(6)
  x = rng.random((50, 6, 6, 1)).astype(np.float32)
  tables = neighbours.Tables(x, k=4)
  raw = tables.raw()
  np.testing.assert_array_equal(raw, neighbours.neighbour_table(x, k=4))
  assert tables.raw() is raw  # computed once
  shifted = tables.raw(neighbours.VOTE_SHIFT)
  assert neighbours.VOTE_SHIFT == 2
  np.testing.assert_array_equal(
      shifted, neighbours.neighbour_table(x, k=4, shift=2))
  # Groups of at most ceil(50 / 3) = 17 images, from the raw table.
  np.testing.assert_array_equal(
      tables.groups(3), neighbours.anchor_groups(raw, max_size=17))
  assignments = (np.arange(50) % 3).astype(np.int32)
  assert tables.vote(assignments, num_clusters=3, rounds=0) is assignments
  voted = tables.vote(assignments, num_clusters=3, rounds=2)
  np.testing.assert_array_equal(
      voted, neighbours.knn_vote(assignments, shifted, num_clusters=3,
                                 rounds=2))
  assert (voted != assignments).any()
  # With z, the latent's own table votes too.
  z = rng.normal(size=(50, 5)).astype(np.float32)
  latent = _cosine_neighbours(z, 4)
  with_z = tables.vote(assignments, num_clusters=3, rounds=1, z=z)
  np.testing.assert_array_equal(
      with_z, neighbours.knn_vote(
          assignments, np.concatenate([shifted, latent], 1), num_clusters=3,
          rounds=1))
  assert (with_z != tables.vote(assignments, num_clusters=3,
                                rounds=1)).any()


def _chains_and_scattered():
  angles = np.concatenate([np.linspace(0.0, 0.5, 6),
                           np.linspace(1.2, 1.7, 6)])
  chains = np.stack([np.cos(angles), np.sin(angles)], 1).reshape(12, 1, 1, 2)
  scattered = np.random.default_rng(3).random((40, 4, 4, 1))
  return (neighbours.Tables((chains + 2.0).astype(np.float32), k=2),
          neighbours.Tables(scattered.astype(np.float32), k=2))


def test_chains_are_told_from_scattered_points_by_their_groups():
  # Two chains (as two pose circles) close into 2 groups for K = 2.
  chains, scattered = _chains_and_scattered()
  assert chains.chains(2) == (
      True, "2 mutual-neighbour groups for K=2: at most 2K")
  # Scattered points leave many small groups, more than 2K.
  found, why = scattered.chains(2)
  assert not found and "more than 2K" in why
  assert int(why.split()[0]) == scattered.groups(2).max() + 1 > 4


def test_the_general_recipe_applies_chains_only_to_chained_data():
  from ddlsc_tf import configs, train  # pylint: disable=import-outside-toplevel
  chains, scattered = _chains_and_scattered()
  general = configs.GENERAL.replace(num_clusters=2, batch_size=4, knn_k=2,
                                    batch_neighbours=0)
  config, choice = train.decide_from_data(general, chains, 12)
  assert config == general.replace(**configs.CHAINS)
  assert choice == {"chains": True, "changes": configs.CHAINS,
                    "why": "2 mutual-neighbour groups for K=2: at most 2K"}
  config, choice = train.decide_from_data(general, scattered, 40)
  assert config == general.replace(anchor_groups=False)
  assert not choice["chains"] and choice["changes"] == {
      "anchor_groups": False}
  # Too many images for an exact equal-size assignment: groups, a spectral
  # start and refreshed partitions.
  config, choice = train.decide_from_data(
      general, chains, configs.CHAINS_BALANCED_POINTS + 1)
  assert config == general.replace(**configs.CHAINS_MANY)
  assert (config.cluster_init, config.cluster2_assignment) == (
      "spectral", "refresh")
  # ... with MNIST's 15-iteration stage II, not the general recipe's 6;
  # the refreshed partitions are voted on the raw images' neighbours only.
  assert general.cluster2_iterations == 6
  assert (config.cluster2_iterations, config.vote_latent_from) == (
      configs.MNIST.cluster2_iterations, None)
  assert "not equal sizes" in choice["why"]
  # A preset decides nothing.
  assert train.decide_from_data(configs.COIL20, chains, 12) == (
      configs.COIL20, None)


def test_the_data_never_overrides_a_field_the_user_set():
  from ddlsc_tf import configs, train  # pylint: disable=import-outside-toplevel
  chains, _ = _chains_and_scattered()
  general = configs.GENERAL.replace(num_clusters=2, batch_size=4, knn_k=2,
                                    batch_neighbours=0, lambda_w=0.05,
                                    cluster2_iterations=9)
  config, choice = train.decide_from_data(
      general, chains, 12, fixed=("lambda_w", "cluster2_iterations", "seed"))
  assert (config.lambda_w, config.cluster2_iterations) == (0.05, 9)
  assert config.anchor_groups and config.cluster2_assignment == "balanced"
  assert choice["kept_as_set"] == ["cluster2_iterations", "lambda_w"]
  assert "lambda_w" not in choice["changes"]
  assert config == general.replace(**choice["changes"])
  # anchor_groups=None given is the choice left to the data, not kept.
  config, choice = train.decide_from_data(general, chains, 12,
                                          fixed=("anchor_groups",))
  assert config.anchor_groups and "kept_as_set" not in choice


def test_above_the_exact_limit_tables_come_from_hnsw(monkeypatch):
  rng = np.random.default_rng(4)
  centres = rng.random((8, 6, 6, 1))
  x = (centres[rng.integers(0, 8, 400)] +
       0.1 * rng.random((400, 6, 6, 1))).astype(np.float32)
  exact = neighbours.neighbour_table(x, k=5)
  monkeypatch.setattr(neighbours, "EXACT_MAX_IMAGES", 100)
  approx = neighbours.neighbour_table(x, k=5)
  assert approx.shape == (400, 5) and approx.dtype == np.int32
  assert not (approx == np.arange(400)[:, None]).any()  # never itself
  recall = np.mean([len(set(a) & set(b)) / 5
                    for a, b in zip(approx, exact)])
  assert recall >= 0.95
  # One thread builds the graph: the same table every time.
  np.testing.assert_array_equal(approx, neighbours.neighbour_table(x, k=5))


def test_a_k_table_is_the_first_columns_of_a_wider_one_even_with_ties():
  # Tables serves the k-table from one wider scan: with many exact
  # duplicates (ties, and an image pushed out of its own top k + 1) the
  # first k columns must still be what a scan for k gives.
  rng = np.random.default_rng(7)
  x = np.repeat(rng.random((6, 5, 5, 1)).astype(np.float32), 12, axis=0)
  wide = neighbours.neighbour_table(x, k=40, chunk=16)
  for k in (1, 4, 11, 20):
    np.testing.assert_array_equal(
        wide[:, :k], neighbours.neighbour_table(x, k=k, chunk=16))


def test_tables_scan_the_data_once_for_both_tables(monkeypatch):
  x = np.random.default_rng(8).random((60, 6, 6, 1)).astype(np.float32)
  expected = neighbours.neighbour_table(x, k=4, shift=2)
  scans = []
  scan = neighbours.neighbour_table

  def counted(images, **kwargs):
    if not kwargs.get("shift"):
      scans.append(kwargs["k"])
    return scan(images, **kwargs)

  monkeypatch.setattr(neighbours, "neighbour_table", counted)
  tables = neighbours.Tables(x, k=4)
  tables.raw()
  np.testing.assert_array_equal(tables.raw(neighbours.VOTE_SHIFT), expected)
  assert scans == [neighbours.VOTE_CANDIDATES]  # one scan, 50 wide


def test_a_resumed_run_reads_its_kept_tables_and_other_data_does_not(
    monkeypatch, tmp_path):
  x = np.random.default_rng(10).random((60, 6, 6, 1)).astype(np.float32)
  first = neighbours.Tables(x, k=4, folder=str(tmp_path), fingerprint="a" * 64)
  expected = first.raw(), first.raw(neighbours.VOTE_SHIFT)
  assert len(list(tmp_path.glob("table-*.npy"))) == 2

  def no_scan(images, **kwargs):
    raise AssertionError("scanned again")

  monkeypatch.setattr(neighbours, "neighbour_table", no_scan)
  again = neighbours.Tables(x, k=4, folder=str(tmp_path),
                            fingerprint="a" * 64)
  np.testing.assert_array_equal(again.raw(), expected[0])
  np.testing.assert_array_equal(again.raw(neighbours.VOTE_SHIFT), expected[1])
  other = neighbours.Tables(x, k=4, folder=str(tmp_path),
                            fingerprint="b" * 64)
  with pytest.raises(AssertionError, match="scanned again"):
    other.raw()
  with pytest.raises(ValueError, match="both a folder and the data's "
                     "fingerprint"):
    neighbours.Tables(x, k=4, folder=str(tmp_path))


def test_a_pool_narrower_than_the_candidates_is_refused():
  x = np.random.default_rng(9).random((30, 6, 6, 1)).astype(np.float32)
  pool = neighbours.neighbour_table(x, k=5)
  with pytest.raises(ValueError, match="pool must hold >= 10"):
    neighbours.neighbour_table(x, k=3, shift=1, candidates=10, pool=pool)


@pytest.mark.parametrize("exact_max", [None, 100])
def test_knn_affinity_is_scikit_learns_symmetrised_knn_graph(monkeypatch,
                                                            exact_max):
  rng = np.random.default_rng(5)
  z = rng.normal(size=(300, 4))
  z /= np.linalg.norm(z, axis=1, keepdims=True)
  if exact_max is not None:  # the HNSW path, exact on so few points
    monkeypatch.setattr(neighbours, "EXACT_MAX_IMAGES", exact_max)
  graph = sk_neighbors.kneighbors_graph(z, 6, include_self=True)
  expected = 0.5 * (graph + graph.T)
  affinity = neighbours.knn_affinity(z, k=6)
  assert affinity.shape == (300, 300)
  assert abs(affinity - expected).max() == 0
  # k = 1: each point is its own only neighbour.
  np.testing.assert_array_equal(
      neighbours.knn_affinity(z, k=1).toarray(), np.eye(300))
  with pytest.raises(ValueError, match="1 <= k <= N = 300, got k=301"):
    neighbours.knn_affinity(z, k=301)

"""Each phase's loss settings, frozen and saved with the model: the
weights and anchor rules of eq. 6 (pre-training), eq. 8 (stage I) and
eq. 11 (stage II)."""

import dataclasses

from ddlsc_tf import configs


@dataclasses.dataclass(frozen=True)
class PretrainLoss:
  """Eq. 6, L_d + λ L_r, and the anchors that L_d uses (stage I's L_d too,
  with its kNN and copy anchors but not the anchor groups)."""
  objective: str = "discriminative"    # or "reconstruction": L_r alone
  knn_k: int = 10                      # the per-batch kNN graph's k
  anchor_fraction: float = 0.3         # kNN pairs kept as anchors
  anchor_selection: str = "similarity"  # anchors.ANCHOR_SELECTIONS
  anchor_power: float = 1.0            # q of the anchor pull (1 - C)^q
  alpha: float = 0.1                   # α of eq. 3 (ours: "α < 1")
  lambda_r: float = 1e-3               # λ of eq. 6, L_r's weight everywhere
  lambda_g: float = 0.0                # the anchor groups' mean push

  def __post_init__(self):
    if self.objective not in configs.PRETRAIN_LOSSES:
      raise ValueError(f"objective must be one of {configs.PRETRAIN_LOSSES}, "
                       f"got {self.objective!r}.")


@dataclasses.dataclass(frozen=True)
class Stage1Loss:
  """Eq. 8: −L_c + λ_d L_d + λ_r L_r."""
  lambda_d: float = 1.0                # its value now (stage I moves it)
  softmax_scale: float = 0.0           # > 0: fit S by a softmax (ours)


@dataclasses.dataclass(frozen=True)
class Stage2Loss:
  """Eq. 11: −L_c − λ_w L_w + λ_b L_b + λ_r L_r."""
  lambda_w: float = 0.3
  lambda_b: float = 1.0
  softmax_scale: float = 0.0           # > 0: fit S by a softmax (ours)


def from_value(kind, value):
  """A settings object from itself, a dict (a saved config) or None."""
  if value is None:
    return kind()
  return kind(**value) if isinstance(value, dict) else value

"""Optimal-transport core: ground costs, entropic OT (log-domain Sinkhorn), Sinkhorn
divergence and the semi-debiased DP-Sinkhorn loss. Depends only on torch (and geomloss
for the optional reference path); nothing here knows about privacy or training."""

from dpsynth.ot.costs import (
    FeatureAugmentedCost,
    GroundCost,
    L1Cost,
    MixedL2L1Cost,
    SquaredEuclideanCost,
    embed_with_labels,
    l1_distances,
    lp_power_cost,
    make_cost,
    squared_distances,
)
from dpsynth.ot.geomloss_backend import geomloss_entropic_ot
from dpsynth.ot.losses import num_extra, semi_debiased_loss, sinkhorn_divergence, split_generated
from dpsynth.ot.sinkhorn import (
    entropic_ot,
    ot_value_from_potentials,
    sinkhorn_potentials,
    transport_plan,
    uniform_weights,
)

__all__ = [
    "FeatureAugmentedCost",
    "GroundCost",
    "L1Cost",
    "MixedL2L1Cost",
    "SquaredEuclideanCost",
    "embed_with_labels",
    "entropic_ot",
    "geomloss_entropic_ot",
    "l1_distances",
    "lp_power_cost",
    "make_cost",
    "num_extra",
    "ot_value_from_potentials",
    "semi_debiased_loss",
    "sinkhorn_divergence",
    "sinkhorn_potentials",
    "split_generated",
    "squared_distances",
    "transport_plan",
    "uniform_weights",
]

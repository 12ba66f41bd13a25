"""The report's tables as params.yaml declares them: which runs fill which published rows."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dpsynth.config.base import Name, Strict


class TableRow(Strict):
    """One row of a report table: the paper's row and the run that reproduces it.

    ``experiment`` (a named experiment or sweep cell) or ``real`` (a dataset: its
    ``results/real/{real}/metrics.json``) names our run; a row with neither is the
    paper's "reported only" row. ``paper_row`` is a row id of the table's ``published``
    table in ``dpsynth/report/published.yaml`` (``other_table:row`` picks another one);
    None: the paper has no such row.
    """

    label: str
    experiment: Name | None = None
    real: Name | None = None
    paper_row: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "TableRow":
        if self.experiment is not None and self.real is not None:
            raise ValueError("a row takes experiment or real, not both")
        if self.experiment is None and self.real is None and self.paper_row is None:
            raise ValueError("a row needs experiment, real or paper_row")
        return self


class Table(Strict):
    title: str
    paper: str = Field(description="where the published numbers come from (paper and table)")
    experiments: list[Name] = []
    sweeps: list[Name] = []
    kind: Literal["methods", "grid", "w2_noise", "privacy", "manifold", "train_size", "wavelet"] = Field(
        default="methods", description="methods: rows below; grid: one row per sweep cell, matched to the "
        "paper's rows by the swept values; w2_noise: results/w2_noise/{dataset}.csv; privacy: every run's "
        "epsilon by accountant and convention; manifold: Reshetova et al.'s 2-D figures (Figs. 1, 6, 7), "
        "`experiments` being entropic_wgan runs on `dataset`, one per (local mechanism, loss entropic or "
        "exact): a row per mechanism, a column per loss, the privatized points behind the learned ones; "
        "train_size: Reshetova et al.'s Fig. 11, `sweeps` over the training-set size n (sweep key n) of an "
        "entropic_wgan run on `dataset`: W2 to the clean training and held-out data vs n, log-log slopes; "
        "wavelet: Reshetova et al.'s Figs. 2 and 8, `experiments`/`sweeps` being wavelet_wgan and entropic_wgan "
        "(loss exact or entropic) runs: a row per (mechanism, epsilon), the six-column figure")
    published: str | None = Field(default=None, description="table id in dpsynth/report/published.yaml")
    dataset: Name | None = Field(default=None, description="picks the paper's columns for this dataset "
                                 "(e.g. mnist.fid); w2_noise: the sweep CSV's dataset")
    rows: list[TableRow] = []
    protocol: Literal["gs_wgan"] | None = Field(
        default=None, description="the paper's own evaluation protocol, when it is not the project's: gs_wgan "
        "(GS-WGAN Table 1: classifier IS, FID against the training split, a 12-model zoo, Avg and Calibrated "
        "Acc). The evaluate jobs of this table's runs and real-data rows compute it (sizes: the scale's "
        "gs_wgan_eval), and the table shows its columns; a methods table only")
    step_check: Name | None = Field(
        default=None, description="train_size: an experiment equal to one of the sweep's cells (the same "
        "train_size) but trained at twice its steps; the table compares the two W2 values (the step count's "
        "criterion: at most 5 % apart)")
    notes: list[str] = Field(default_factory=list, description="ours about this table (a deviation from the "
                             "papers, the papers disagreeing with each other); printed under the table")
    target: Name | None = Field(
        default=None, description="the build target this table belongs to (`snakemake <target>`, `dpsynth workflow "
        "targets`): the tables of one paper table share one (ICLR Table 1's MNIST and Fashion-MNIST halves); "
        "default: the table's own name. A privacy table lists every run and has no target")

    @model_validator(mode="after")
    def _step_check_kind(self) -> "Table":
        if self.step_check is not None and self.kind != "train_size":
            raise ValueError(f"step_check is for a train_size table, not kind {self.kind}")
        return self

    @model_validator(mode="after")
    def _protocol_kind(self) -> "Table":
        if self.protocol is not None and self.kind != "methods":
            raise ValueError(f"protocol: {self.protocol} is for a methods table, not kind {self.kind}")
        return self

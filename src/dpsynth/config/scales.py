"""Scale presets: what makes a run smaller (smoke, quick) without changing what it means."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator

from dpsynth.config.base import KeyedValueError, Strict, validation_errors
from dpsynth.config.methods import METHOD_SPECS, refuse_foreign_keys


#: The most images one synthetic set (or one FID side) may hold: 16 x the papers' 60,000. Sampling holds
#: a whole set in memory, so a typo such as 1e12 would otherwise pass `config check` and fail later
#: allocating terabytes (a CelebA-sized set of 1,000,000 is ~3 GB of uint8).
MAX_IMAGES = 1_000_000
#: The most synthetic sets per generator (the papers: 5).
MAX_SETS = 100


class GsWganEvalSizes(Strict):
    """The sizes of GS-WGAN's own evaluation protocol (Chen, Orekondy, Fritz, NeurIPS 2020,
    arXiv:2006.08265, Table 1, and the authors' ``evaluation/`` scripts) at one scale. The defaults are
    the paper's; the quick scale shrinks them (cost), and the table's notes print the sizes used.

    Computed only for the runs and real-data rows of a table with ``protocol: gs_wgan``
    (``Params.evaluation_protocols``), so the rest of the pipeline pays nothing for it."""

    zoo_train_subset: int | None = Field(
        default=None, gt=0, le=MAX_IMAGES, description="images of each synthetic set (of the real training split, for a real "
        "row) that each of the 12 models of the zoo trains on; None: the whole set (the paper: 60,000)")
    is_samples: int | None = Field(
        default=None, gt=0, le=MAX_IMAGES, description="generated images (real test images, for a real row) the classifier "
        "Inception Score scores; None: all of them (the authors' script scores the whole generated set)")
    zoo_max_iter: int | None = Field(
        default=None, gt=0, description="upper bound on the iterations of the zoo's iterative solvers (the authors': "
        "Linear SVM 10,000, logistic regression 5,000, MLP 200 epochs); None keeps theirs. A cut for wiring checks: "
        "on the images of a barely trained generator the Linear SVM never converges and runs all 10,000")
    fid_generated: int = Field(default=20000, gt=0, le=MAX_IMAGES, description="generated images (real test images, for a real "
                               "row) compared with the training split (the authors' eval_fid.py: 20,000)")
    fid_train_reference: Annotated[int, Field(gt=0, le=MAX_IMAGES)] | Literal["all"] = Field(
        default="all", description="real training images on that FID's reference side: a count (the first "
        "ones) or 'all' (the authors': the whole training split, 60,000)")


#: A table's ``protocol:`` -> the ScalePreset field holding its sizes (what the evaluate jobs of its runs read).
PROTOCOL_SIZES = {"gs_wgan": "gs_wgan_eval"}


def _known_methods(v: dict[str, Any]) -> None:
    for method in v:
        if method not in METHOD_SPECS:
            raise KeyedValueError(str(method), f"unknown method (known: {', '.join(METHOD_SPECS)})")


class ScalePreset(Strict):
    """Overrides that make a run smaller without changing what it means."""

    train_steps: int | None = Field(
        default=None,
        gt=0,
        description="Step budget; None keeps the experiment's own (paper) setting. A private run "
        "under a step budget calibrates sigma to meet its (epsilon, delta) target.",
    )
    train_subset: int | None = Field(default=None, gt=0, description="Private training records used.")
    n_synthetic: int = Field(gt=0, le=MAX_IMAGES, description="Labelled images per synthetic dataset.")
    n_synthetic_sets: int = Field(gt=0, le=MAX_SETS, description="Synthetic datasets per generator.")
    classifier_max_epochs: int = Field(gt=0)
    classifier_train_subset: int | None = Field(default=None, gt=0)
    classifier_test_subset: int | None = Field(
        default=None, gt=0, description="real test images the classifiers are scored on: a seeded subset, the same "
        "for every classifier and set (None: the whole test split, the papers' protocol). Scoring the CNN costs "
        "~0.6 ms of a CPU thread per image: most of a smoke evaluate job at 10,000.")
    fid_samples: int = Field(gt=0, le=MAX_IMAGES,
                             description="generated (or, for a real row, real training) images per FID")
    fid_reference_samples: Annotated[int, Field(gt=0, le=MAX_IMAGES)] | Literal["all"] | None = Field(
        default=None, description="real test images on FID's reference side: a count, 'all' (the whole test "
        "split, the papers' protocol), or None (as many as fid_samples)")
    max_batch_size: int | None = Field(default=None, gt=0, description="cap on batch sizes (a CPU cannot "
                                       "afford the non-private batch of 500); recorded in every output. Not applied to a method that "
                                       "reads its data once (DP-MERF: its batches are generated samples)")
    method_max_batch_size: dict[str, Annotated[int, Field(gt=0)]] = Field(
        default_factory=dict, description="per-method cap on batch sizes, replacing max_batch_size for that "
        "method (the entropic WGAN's 2-D runs afford a larger batch than the image methods' 64)")
    hparams: dict[str, dict[str, Any]] = Field(default_factory=dict, description="per-method hyperparameter "
                                               "overrides for short runs (validated by the method's own model; "
                                               "recorded in every output)")
    lr_multiplier: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="per-method factor on each experiment's own lr (a short run "
        "needs a larger step than the papers' long ones); a multiplier, not a value, so an edited or swept lr "
        "keeps its effect and its ratios at this scale")
    method_train_steps: dict[str, Annotated[int, Field(gt=0)]] = Field(
        default_factory=dict, description="per-method step budget, overriding train_steps")
    warmup_steps: int | None = Field(default=None, gt=0, description="GS-WGAN critic warm start.")
    n_critics: int | None = Field(default=None, gt=0, description="GS-WGAN shard/critic count.")
    w2_noise_steps: int | None = Field(default=None, gt=0, description="generator steps per (loss, noise) "
                                       "of the W2-vs-noise sweep, replacing the sweep's own (None keeps it)")
    w2_noise_seeds: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, description="the W2-vs-noise sweep's training runs at this scale, replacing its own seeds "
        "(paper_gpu: 10 runs per cell)")
    w2_noise_pack: int | None = Field(default=None, gt=0, le=1024, description="train the W2-vs-noise sweep's "
                                      "runs in packs of this many on one device (the packed trainer, "
                                      "methods/entropic_wgan/packed.py; the GPU when there is one); None: one "
                                      "run at a time")
    w2_noise_train_subset: int | None = Field(default=None, gt=0, description="clean training records the "
                                              "W2-vs-noise sweep privatizes; None: all")
    gs_wgan_eval: GsWganEvalSizes = Field(default_factory=GsWganEvalSizes, description="sizes of GS-WGAN's "
                                          "evaluation protocol, for the runs of a `protocol: gs_wgan` table")

    @field_validator("hparams")
    @classmethod
    def _method_hparams(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each method's overrides must be settings of that method (checked by its own model)."""
        _known_methods(v)
        for method, overrides in v.items():
            if "lr" in overrides:
                raise KeyedValueError(f"{method}.lr", "a scale does not replace an experiment's lr (an edited or swept "
                                      f"lr would have no effect): give a factor instead, lr_multiplier: {{{method}: "
                                      "<factor>}, e.g. 100 to train the papers' 1.0e-5 at 1.0e-3")
            try:
                refuse_foreign_keys(method, overrides)
                METHOD_SPECS[method].hparams.model_validate(overrides)
            except KeyedValueError as exc:
                raise KeyedValueError(f"{method}.{exc.subkey}", str(exc)) from None
            except ValidationError as exc:
                loc, msg = validation_errors(exc)[0]
                raise KeyedValueError(".".join(x for x in (method, loc) if x), msg) from None
        return v

    def batch_cap(self, method: str) -> int | None:
        """The batch-size cap a run of ``method`` trains under at this scale (None: no cap)."""
        return self.method_max_batch_size.get(method, self.max_batch_size)

    @field_validator("method_train_steps", "lr_multiplier", "method_max_batch_size")
    @classmethod
    def _method_steps(cls, v: dict[str, Any]) -> dict[str, Any]:
        _known_methods(v)
        return v

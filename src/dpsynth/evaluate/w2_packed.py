"""The W2-vs-noise sweep's runs (Reshetova et al., arXiv:2306.09547, Fig. 5) trained in packs: the fast path
beside ``w2.train_and_score``'s one run at a time.

Each pack is up to ``pack`` runs of one loss (``methods.entropic_wgan.packed``: their own
weights, Adam moments, seeds, privatized records and temperatures 2 s^2, one batched step). Each trained
generator is then scored by ``w2.train_and_score`` itself (handed the generator instead of fitting one), so the
rows -- columns, W2 draws, the second measure, the kept samples -- are the per-run sweep's, and the claim checker
reads them alike. The rows differ from the per-run trainer's in one thing: the members' latents and batches
come from ``packed.CounterDraws`` (a hash of seed and step on the device), not the per-run trainer's host
generators, so the cache keys them apart (``settings["trainer"]``).

A cut sweep resumes: every member's checkpoint is kept under ``<row cache>/packed/<row key>.pt`` every
``save_seconds`` and at the end of its pack; a pack resumes from its members' checkpoints (members at one
step pack together), and a finished run's checkpoint is deleted once its row is cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["packs", "train_packed"]


def _resume_step(path: Path | None) -> int:
    """The step a member's checkpoint holds (0: none), read without loading its tensors."""
    if path is None or not path.is_file():
        return 0
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["step"])
    except Exception:  # noqa: BLE001 - a damaged checkpoint: that member starts again
        path.unlink(missing_ok=True)
        return 0


def packs(runs: Sequence[Any], todo: Sequence[int], size: int,
          ckpt: Callable[[Any], Path | None] = lambda r: None) -> list[list[int]]:
    """``todo``'s runs in packs of at most ``size``: one loss and one step to resume from per pack (members step
    in lock-step; a member with more steps -- a step check -- goes on after the others finish), in the sweep's
    order, so a cut sweep forms the same packs again."""
    if size < 1:
        raise ValueError(f"pack size must be >= 1, got {size}")
    groups: dict[tuple[str, int], list[int]] = {}
    for i in todo:
        run = runs[i]
        groups.setdefault((run.loss, _resume_step(ckpt(run))), []).append(i)
    return [g[j:j + size] for g in groups.values() for j in range(0, len(g), size)]


def train_packed(runs: Sequence[Any], todo: Sequence[int], clean_train: np.ndarray, settings: dict[str, Any], *,
                 pack: int, device: str = "cpu", folder: Path | None = None,
                 key: Callable[[Any], str] = lambda r: f"{r.role}-{r.loss}-s{r.noise_std:g}-{r.seed}",
                 save_seconds: float = 120.0,
                 on_step: Callable[[], None] | None = None,
                 privatize: Callable[[np.ndarray, float, int, int], np.ndarray]) -> Iterator[tuple[int, Any, float]]:
    """Train ``todo``'s runs pack by pack; yields ``(index, generator, training seconds per member)`` for every
    run as it reaches its own step count. ``folder`` keeps the member checkpoints (None: none kept, nothing
    resumes). ``privatize(train, s, seed, level)``: a run's privatized records (``w2.privatized_records``,
    handed in by the sweep so this module never imports it back)."""
    import torch

    from dpsynth.config import EntropicWGANHparams
    from dpsynth.methods.entropic_wgan import LossSpec, to_records
    from dpsynth.methods.entropic_wgan.packed import Member, PackedEWGAN

    st = settings
    train = to_records(clean_train)
    shape = tuple(np.asarray(clean_train).shape[1:])
    where = Path(folder) if folder is not None else None

    def ckpt(run: Any) -> Path | None:
        return None if where is None else where / f"{key(run)}.pt"

    for group in packs(runs, todo, pack, ckpt):
        t0 = time.perf_counter()
        first = runs[group[0]]
        records: dict[tuple[int, int], torch.Tensor] = {}  # one privatized array per (seed, level), shared
        members = {}
        for i in group:
            r = runs[i]
            if (r.seed, r.level) not in records:
                noisy = privatize(train, r.noise_std, r.seed, r.level)
                records[(r.seed, r.level)] = torch.as_tensor(noisy.astype(np.float32), device=device)
                del noisy
            members[i] = Member(key(r), r.seed, records[(r.seed, r.level)], 2.0 * r.noise_std ** 2)
        hp = EntropicWGANHparams(batch_size=st["batch_size"], lr=st["lr"], optimizer=st["optimizer"],
                                 generator=st["generator"], loss=first.loss)  # type: ignore[arg-type]
        spec = LossSpec(loss=first.loss, p=2, temperature=1.0, n_iter=st["sinkhorn_iters"],
                        scaling=st["sinkhorn_scaling"])  # each member's own temperature replaces 1.0
        left = list(group)
        trainer = PackedEWGAN([members[i] for i in left], shape, spec, hp, device=device)
        if where is not None:
            trainer.resume(where)
        while left:
            until = min(runs[i].steps for i in left)
            trainer.run(until, save_seconds=save_seconds if where is not None else None, folder=where,
                        on_step=(lambda n=len(left): [on_step() for _ in range(n)]) if on_step is not None else None)
            seconds = (time.perf_counter() - t0) / len(group)
            for k, i in enumerate(left):
                if runs[i].steps == until:
                    yield i, trainer.model.generator(k), seconds
            rest = [k for k, i in enumerate(left) if runs[i].steps > until]
            if not rest:
                break
            # the members with more steps (the step checks) go on as a smaller pack, from their own state: their
            # draws depend on their seed and step only, so nothing changes for them
            states = [trainer.member_state(k) for k in rest]
            left = [left[k] for k in rest]
            trainer = PackedEWGAN([members[i] for i in left], shape, spec, hp, device=device)
            for k, state in enumerate(states):
                trainer.load_member_state(k, state)
            trainer.steps_done = until
        del trainer, records


def forget(folder: Path | None, name: str) -> None:
    """Delete a finished member's checkpoint (its row is cached now)."""
    if folder is not None:
        (Path(folder) / f"{name}.pt").unlink(missing_ok=True)


def sweep_packed(runs: Sequence[Any], todo: Sequence[int], clean_train: np.ndarray, clean_ref: np.ndarray,
                 settings: dict[str, Any], *, pack: int, device: str, cache: Any, workers: int, threads: int,
                 extra: Callable[[np.ndarray, int], dict[str, Any]] | None,
                 on_step: Callable[[], None] | None, privatize: Callable[..., np.ndarray],
                 score: Callable[..., dict[str, Any]], worker_init: Callable[..., None],
                 score_in_worker: Callable[..., dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``noise_sweep``'s packed path: ``(index, row)`` per run of ``todo``, each row cached (``cache``: the
    sweep's row cache, whose keys name the member checkpoints) as it is scored. The scoring -- exact W2 on
    the host, 8 draws per run -- runs in ``workers`` processes while the next pack trains. The sweep hands in
    its own pieces -- ``privatize`` (a run's records), ``score`` (``train_and_score``), ``worker_init`` and
    ``score_in_worker`` (its worker processes' set-up and scoring of a trained generator's weights) -- so
    the sweep imports this module and never the other way round."""
    import multiprocessing as mp
    from concurrent.futures import Future, ProcessPoolExecutor

    from dpsynth.methods.entropic_wgan import generator_arch

    arch = generator_arch(settings["generator"], tuple(np.asarray(clean_train).shape[1:]))
    folder = cache.folder / "packed" if cache is not None else None
    key = (lambda r: cache._path(r).stem) if cache is not None else (lambda r: f"{r.role}-{r.loss}-{r.seed}")
    pool = None
    if workers > 1:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=worker_init,
                                   initargs=(clean_train, clean_ref, threads, extra))
    pending: list[tuple[int, Future[dict[str, Any]]]] = []

    def done(i: int, row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if cache is not None:
            cache.put(runs[i], row)
        forget(folder, key(runs[i]))
        return i, row

    try:
        for i, gen, secs in train_packed(runs, todo, clean_train, settings, pack=pack, device=device,
                                         folder=folder, key=key, on_step=on_step, privatize=privatize):
            if pool is None:
                yield done(i, score(runs[i], clean_train, clean_ref, settings, extra=extra, generator=gen,
                                    trained_seconds=secs))
                continue
            state = {k: v.cpu() for k, v in gen.state_dict().items()}
            pending.append((i, pool.submit(score_in_worker, runs[i], settings, arch, state, secs)))
            while pending and pending[0][1].done():
                j, fut = pending.pop(0)
                yield done(j, fut.result())
        for j, fut in pending:
            yield done(j, fut.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)

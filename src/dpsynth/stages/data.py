"""The data stage (`dpsynth data prepare DATASET...`): download or find, verify and convert each
dataset to ``{root}/processed/{dataset}.npz``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import DataError
from dpsynth.locations import check_writable_dir

if TYPE_CHECKING:
    from dpsynth.config import Params
    from dpsynth.data.prepare import Sources


def sources_from(params: Params | None, root: str | None = None, extra_dirs: list[str] | None = None) -> Sources:
    from dpsynth.data.prepare import Sources

    data = params.data if params is not None else None
    return Sources(
        root=Path(root or (data.root if data else "data")),
        local_dirs=tuple(Path(d) for d in (extra_dirs or []) + (list(data.local_dirs) if data else [])),
        celeba_dir=Path(data.celeba_dir) if data and data.celeba_dir else None,
    )


def run_prepare(params: Params | None, datasets: list[str], *, root: str | None = None,
                source_dirs: list[str] | None = None) -> int:
    """Prepare ``datasets`` under ``root`` (default: params ``data.root``, else ./data), looking in
    ``source_dirs`` (then params ``data.local_dirs``) for raw files before downloading; ``params``
    None: no parameters file."""
    from dpsynth.data.prepare import prepare, processed_paths
    from dpsynth.data.registry import DATASETS, unknown_dataset_message

    src = sources_from(params, root=root, extra_dirs=source_dirs)
    unknown = [name for name in datasets if name not in DATASETS]
    if unknown:  # fail on every typo at once, before any work, with the closest registered names
        raise DataError("; ".join(unknown_dataset_message(name) for name in unknown))
    check_writable_dir(src.root, "--root" if root else "data root (params data.root)")
    for name in datasets:
        info = prepare(name, src)
        npz, _ = processed_paths(src.root, name)
        print(f"{name}: {info['n_train']} train + {info['n_test']} test records of shape "
              f"{tuple(info['record_shape'])} -> {npz} ({info['seconds']:.1f} s)")
    return 0

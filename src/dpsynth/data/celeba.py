"""CelebA from its official folder layout (placed by hand: it has no stable open mirror).

Expected, in one directory (``data.celeba_dir`` or ``data/raw/celeba``):
``img_align_celeba/000001.jpg ...``, ``list_attr_celeba.txt`` and
``list_eval_partition.txt`` (the two text files may also sit in ``Anno/`` and ``Eval/``
as in the official archive). Images are centre-cropped to a square and downsampled to
``resolution`` by area averaging; label = the attribute (``Male``) as 0/1; partition 0 is
train, 2 is test (validation, 1, is unused, as in the papers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.errors import DataError

ATTR_FILE = "list_attr_celeba.txt"
PARTITION_FILE = "list_eval_partition.txt"
IMAGE_DIR = "img_align_celeba"


def _find(root: Path, name: str, sub: str) -> Path | None:
    for cand in (root / name, root / sub / name):
        if cand.is_file():
            return cand
    return None


def _locate(candidates: list[Path]) -> tuple[Path, Path, Path]:
    """The image folder and the two text files, from the first candidate that has all three.

    Otherwise the error says, per candidate folder, whether it exists and exactly which entries it
    lacks: a half-extracted archive (images but no ``list_eval_partition.txt``) is the usual case,
    and "not found" alone sends the user looking for the wrong thing."""
    problems = []
    for root in candidates:
        attr, part = _find(root, ATTR_FILE, "Anno"), _find(root, PARTITION_FILE, "Eval")
        if attr and part and (root / IMAGE_DIR).is_dir():
            return root / IMAGE_DIR, attr, part
        if not root.is_dir():
            problems.append(f"{root} does not exist")
            continue
        missing = [] if (root / IMAGE_DIR).is_dir() else [f"{IMAGE_DIR}/"]
        missing += [f"{name} (also looked in {root / sub})" for name, sub, found in
                    ((ATTR_FILE, "Anno", attr), (PARTITION_FILE, "Eval", part)) if not found]
        problems.append(f"{root} lacks {', '.join(missing)}")
    where = "; ".join(problems) or "no folder configured"
    incomplete = any(root.is_dir() for root in candidates)
    raise DataError(
        f"CelebA {'incomplete' if incomplete else 'not found'}: {where}. Download it by hand (it has no "
        f"open mirror) and place {IMAGE_DIR}/, {ATTR_FILE} and {PARTITION_FILE} in one of these folders "
        "(or set data.celeba_dir in params.yaml)"
    )


def _read_attributes(path: Path, attribute: str) -> dict[str, int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        raise DataError(f"{path}: too short to be {ATTR_FILE}")
    names = lines[1].split()
    if attribute not in names:
        raise DataError(f"{path}: no attribute {attribute!r} (has {len(names)} attributes)")
    col = names.index(attribute)
    out: dict[str, int] = {}
    for i, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != len(names) + 1 or parts[col + 1] not in ("1", "-1"):
            raise DataError(f"{path}:{i}: malformed attribute row")
        out[parts[0]] = int(parts[col + 1] == "1")
    return out


def _read_partition(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[1] not in ("0", "1", "2"):
            raise DataError(f"{path}:{i}: malformed partition row {line!r}")
        out[parts[0]] = int(parts[1])
    return out


def load_image(path: Path, resolution: int) -> np.ndarray:
    """Centre-crop to a square, area-downsample, return uint8 (3, r, r)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = min(w, h)
            left, top = (w - s) // 2, (h - s) // 2
            im = im.crop((left, top, left + s, top + s)).resize((resolution, resolution), Image.Resampling.BOX)
            return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1).copy()
    except (OSError, UnidentifiedImageError) as exc:
        raise DataError(f"{path}: unreadable image ({exc})") from None


def read_celeba(candidates: list[Path], attribute: str = "Male",
                resolution: int = 32) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    img_dir, attr_path, part_path = _locate(candidates)
    labels = _read_attributes(attr_path, attribute)
    partition = _read_partition(part_path)
    missing = sorted(set(partition) - set(labels))
    if missing:
        raise DataError(f"{attr_path}: no attributes for {len(missing)} image(s), e.g. {missing[0]}")
    splits: dict[str, tuple[list[np.ndarray], list[int]]] = {"train": ([], []), "test": ([], [])}
    for fname in sorted(partition):
        split = {0: "train", 2: "test"}.get(partition[fname])
        if split is None:
            continue
        img_path = img_dir / fname
        if not img_path.is_file():
            raise DataError(f"{img_path}: listed in {part_path.name} but missing")
        splits[split][0].append(load_image(img_path, resolution))
        splits[split][1].append(labels[fname])
    arrays: dict[str, np.ndarray] = {}
    for split, (xs, ys) in splits.items():
        if not xs:
            raise DataError(f"{part_path}: the {split} partition is empty")
        arrays[f"x_{split}"] = np.stack(xs)
        arrays[f"y_{split}"] = np.asarray(ys, dtype=np.int64)
    return arrays, {"source": str(img_dir.parent), "attribute": attribute, "resolution": resolution,
                    "crop": "centre square", "resample": "PIL BOX (area)"}

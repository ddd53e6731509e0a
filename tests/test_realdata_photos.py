"""The built-in photographs (tpucompile.realdata): scikit-learn's two are read from its files
without importing scikit-learn (seconds of every small model's compile), pixel for pixel what
its loader returns."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tpucompile import realdata

REPO = Path(__file__).resolve().parent.parent


def test_sklearn_photos_equal_its_loader():
    from sklearn.datasets import load_sample_images
    ds = load_sample_images()
    for img, fn in zip(ds.images, ds.filenames):
        got = realdata._photo(Path(fn).stem)
        assert got.dtype == img.dtype == np.uint8 and np.array_equal(got, img), fn


def test_calibration_images_do_not_import_sklearn():
    """Four calibration crops (china among them) in a fresh process: scikit-learn not imported."""
    code = ("import sys; from tpucompile import realdata; xs = realdata.calibration_images(4, 16); "
            "print(len(xs), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["4", "False"]

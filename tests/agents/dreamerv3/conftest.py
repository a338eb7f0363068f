"""Shared fixtures of the DreamerV3 tests: the reference recordings."""
import numpy as np
import pytest

from wmx.paths import shared_dir


@pytest.fixture(scope="session")
def components():
    """fixtures/dreamerv3/components.npz (29eb964, float32; README sections (f)-(h))."""
    with np.load(shared_dir() / "fixtures/dreamerv3/components.npz") as z:
        return {k: z[k] for k in z.files}

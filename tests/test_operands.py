"""tpusim.arch.operands.last_writes: the in-order result of a numpy assignment with repeated words."""
import numpy as np
import pytest

from tpusim.arch.operands import last_writes


@pytest.mark.parametrize("words", [[], [3], [1, 2, 3], [1, 1], [5, 3, 5, 2], [1, 2, 2, 3], [3, 2, 1],
                                   [0, 4, 8, 1, 5, 9, 2, 6, 10]])
def test_last_writes_equal_in_order_writes(words):
    """Writing value t to words[t] for every t in order, against assigning only the kept ones
    (strictly increasing words keep all, without the sort)."""
    words = np.array(words, dtype=np.int64)
    want = np.full(12, -1)
    for t, w in enumerate(words):
        want[w] = t
    keep = last_writes(words)
    got = np.full(12, -1)
    got[words[keep]] = keep
    np.testing.assert_array_equal(got, want)
    assert list(keep) == sorted(keep)

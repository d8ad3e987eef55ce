"""pack_samples (entrodrop.data.packing): the precompute's rows of whole samples, best fit decreasing."""

import pytest
import torch

from entrodrop.data.packing import pack_samples


def test_pack_samples_places_every_sample_once_within_the_pack_length():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 100, (300,), generator=gen).tolist() + [0, 100, 1]
    rows = pack_samples(lengths, pack_len=100)
    placed = [i for row in rows for i in row]
    assert sorted(placed) == [i for i, n in enumerate(lengths) if n]  # each non-empty sample once
    assert all(sum(lengths[i] for i in row) <= 100 for row in rows)
    assert [lengths[i] for i in rows[0]] == [100]  # a sample of exactly the pack length fills a row
    # Best fit decreasing fills these rows to 95% (in the order given, a new row whenever a
    # sample does not fit the current one would fill 74%).
    assert sum(lengths) / (100 * len(rows)) > 0.95
    assert pack_samples(lengths, pack_len=100) == rows  # a function of the lengths alone


def test_pack_samples_refuses_a_sample_longer_than_the_pack_length():
    with pytest.raises(ValueError, match=r"sample 2 has 9 tokens, more than the pack length 8 \(2 sample"):
        pack_samples([8, 3, 9, 0, 12], pack_len=8)


@pytest.mark.slow  # a fresh process importing torch: 3 s or more
def test_the_ignored_label_is_torchtunes_and_reading_data_imports_no_torchtune():
    import subprocess
    import sys

    from torchtune.data import CROSS_ENTROPY_IGNORE_IDX

    from entrodrop.data.packing import IGNORE_INDEX

    assert IGNORE_INDEX == CROSS_ENTROPY_IGNORE_IDX
    # The loader, and the report that reads runs, start without torchtune's 4 s or more of imports.
    code = "import sys, entrodrop.data.loader, entrodrop.analysis.report; print('torchtune' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"

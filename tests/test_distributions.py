"""Flow-size distributions: shipped files, sampler, Homa special cases, malformed files."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.distributions import (
    DATA_DIR,
    HOMA_MAX_DATA_BYTES_PER_PKT,
    W1_MAX_BYTES,
    load_distribution,
    shipped_distributions,
)
from safs.core.errors import InvalidInput

SHARED = Path("/work/shared/data/flow-sizes")


def test_all_shipped_files_load_and_are_unchanged_copies():
    names = shipped_distributions()
    assert len(names) == 9
    for name in names:
        dist = load_distribution(name)
        assert dist.cdf[-1] <= 1.0 and all(a <= b for a, b in zip(dist.cdf, dist.cdf[1:]))
        if SHARED.exists():
            assert (DATA_DIR / name).read_bytes() == (SHARED / name).read_bytes()


@pytest.mark.parametrize("name", [n for n in shipped_distributions() if n.startswith("homa_")])
def test_homa_sample_mean_matches_stated_mean(name):
    dist = load_distribution(name)
    # Analytic mean of our sampler equals the file's first line (0.5%): confirms step sampling,
    # the W5 packet factor and the W1 Pareto completion.
    assert dist.mean_bytes() == pytest.approx(dist.stated_mean_bytes, rel=5e-3)
    rng = random.Random(7)
    n = 60_000
    mean = sum(dist.sample(rng) for _ in range(n)) / n
    assert mean == pytest.approx(dist.stated_mean_bytes, rel=0.08)


@pytest.mark.parametrize("name", [n for n in shipped_distributions() if n.startswith("hpcc_")])
def test_hpcc_samples_follow_the_cdf(name):
    # Heavy tails make the sample mean noisy; compare the empirical CDF at the listed points.
    dist = load_distribution(name)
    rng = random.Random(3)
    n = 40_000
    samples = sorted(dist.sample(rng) for _ in range(n))
    import bisect
    for size, p in zip(dist.sizes, dist.cdf):
        assert bisect.bisect_right(samples, size) / n == pytest.approx(p, abs=0.015)


def test_w5_sizes_are_packets_times_payload():
    dist = load_distribution("homa_DCTCP_MsgSizeDist.txt")
    assert dist.sizes[0] == 1 * HOMA_MAX_DATA_BYTES_PER_PKT
    assert dist.sizes[-1] == 20000 * HOMA_MAX_DATA_BYTES_PER_PKT
    other = load_distribution("homa_DCTCP_MsgSizeDist.txt", homa_packet_bytes=1000)
    assert other.sizes[-1] == 20_000_000


def test_w1_tail_is_completed_and_capped():
    dist = load_distribution("homa_FacebookKeyValueMsgSizeDist.txt")
    assert dist.pareto_tail is not None and dist.cdf[-1] == pytest.approx(0.47)
    assert dist.quantile(0.2) <= 15  # listed part
    assert dist.quantile(0.5) > 15  # tail starts at the last listed size
    assert dist.quantile(1 - 1e-15) <= W1_MAX_BYTES
    capped = dataclasses.replace(dist, pareto_tail=(dist.pareto_tail[0], dist.pareto_tail[1], 1000))
    assert capped.quantile(1 - 1e-9) == 1000


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=0.999999), st.floats(min_value=0.0, max_value=0.999999))
def test_quantile_is_monotone(u1, u2):
    for name in ("hpcc_WebSearch_distribution.txt", "homa_FacebookKeyValueMsgSizeDist.txt"):
        dist = load_distribution(name)
        lo, hi = sorted((u1, u2))
        assert 1 <= dist.quantile(lo) <= dist.quantile(hi)


def test_interpolation_is_linear_between_points(tmp_path):
    f = tmp_path / "lin.txt"
    f.write_text("0 0\n1000 50\n3000 100\n")
    dist = load_distribution(f)
    assert dist.quantile(0.25) == 500
    assert dist.quantile(0.75) == 2000
    assert dist.mean_bytes() == pytest.approx(0.5 * 500 + 0.5 * 2000)


BAD = [
    ("10 0\n5 50\n20 100\n", "line 2", "increase"),
    ("10 0\n20 60\n30 50\n40 100\n", "line 3", "monotone"),
    ("10 0\n20 60\n", "line 2", "end at 100"),
    ("100.0\n10 0.5\n20 0.9\n", "line 3", "end at 1"),
    ("-5 0\n10 100\n", "line 1", "size must be > 0"),
    ("0 10\n10 100\n", "line 1", "size must be > 0"),
    ("10 0\nabc 50\n", "line 2", "number"),
    ("10 0\n20 50 7\n", "line 2", "two numbers"),
    ("10 0\n20 150\n", "line 2", "0..100"),
    ("", "line 1", "empty"),
]


@pytest.mark.parametrize("text,field,words", BAD)
def test_malformed_cdf_names_file_and_line(tmp_path, text, field, words):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(InvalidInput) as exc:
        load_distribution(f)
    assert exc.value.field == field and words in exc.value.message and exc.value.source == str(f)


def test_incomplete_cdf_refused_unless_w1(tmp_path):
    f = tmp_path / "homa_Other.txt"
    f.write_text("185.0\n1 0.1\n15 0.47\n")
    with pytest.raises(InvalidInput, match="end at 1"):
        load_distribution(f)
    w1 = tmp_path / "homa_FacebookKeyValueMsgSizeDist.txt"
    w1.write_text("185.0\n1 0.1\n15 0.47\n")
    assert load_distribution(w1).pareto_tail is not None


def test_missing_file():
    with pytest.raises(InvalidInput, match="cannot read"):
        load_distribution("no_such_distribution.txt")

"""Flow-size distributions from published CDF files, and an inverse-transform sampler.

Shipped files (controller/safs/data/flow-sizes/, sources in SOURCES.md there) come in two
formats; :func:`load_distribution` tells them apart by the first line:

* HPCC (alibaba-edu/High-Precision-Congestion-Control, traffic_gen/): every line is
  ``size_bytes cdf_percent`` (0..100). Sampled with **linear interpolation** between points,
  as HPCC's ``traffic_gen.py`` does.
* Homa (PlatformLab/HomaSimulation, sizeDistributions/): the first line is the mean message
  size; then ``size cdf_fraction`` (0..1). Sampled as a **step function** (the first listed
  size whose CDF >= u), as ``MsgSizeDistributions::getInterarrivalSizeFromVec`` does.
  Two files need the simulator's special handling, reproduced here:

  - ``homa_DCTCP_MsgSizeDist.txt`` (W5) counts full packets: sizes (and the stated mean) are
    multiplied by the maximum data bytes per packet, :data:`HOMA_MAX_DATA_BYTES_PER_PKT`.
  - ``homa_FacebookKeyValueMsgSizeDist.txt`` (W1) stops at 15 bytes with CDF 0.47; the rest is
    a generalized Pareto tail (``getFacebookSizeInterarrival``): for u > p_last,
    ``size = round(s_last + ((1-p_last)/(1-u))**k - 1) * sigma/k)`` with k = 0.348238,
    sigma = 214.476, capped at 2^30 bytes.

Validation (each raises :class:`safs.core.errors.InvalidInput` naming the file and line): a line
that is not two numbers, a size <= 0 (a size of 0 is accepted only as a zero-probability
anchor, e.g. HPCC's ``0 0`` first line), sizes not strictly increasing, a CDF value outside
[0, 1] or decreasing, and a CDF whose last value is not 1 (except the W1 file, completed as
above).
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from pathlib import Path

from safs.core.errors import InvalidInput
from safs.core.files import data_path, read_text

DATA_DIR = data_path("flow-sizes")

# Homa W1 tail: generalized Pareto parameters and cap.
# Source: PlatformLab/HomaSimulation, homatransport/src/application/MsgSizeDistributions.cc,
# getFacebookSizeInterarrival(): k = 0.348238, sigma = 214.476, maxSize = 0x40000000.
W1_PARETO_K = 0.348238
W1_PARETO_SIGMA = 214.476
W1_MAX_BYTES = 1 << 30

# Max data bytes per Homa packet, used to turn W5 packet counts into bytes. The Homa simulator
# uses MAX_ETHERNET_PAYLOAD_BYTES (1500) - IP_HEADER_SIZE (20) - UDP_HEADER_SIZE (8) -
# HomaPkt::headerSize() for UNSCHED_DATA (WorkloadSynthesizer.cc, initialize()). The header is
# the sum of its C++ field widths, which we did not verify: 30 bytes is an approximation.
HOMA_MAX_DATA_BYTES_PER_PKT = 1500 - 20 - 8 - 30

CDF_TOLERANCE = 1e-6  # slack when checking that a CDF reaches 1


@dataclass(frozen=True)
class SizeDistribution:
    """An empirical flow-size distribution.

    Attributes:
        name: file name it came from.
        sizes: sizes in bytes, strictly increasing (the first may be 0 with CDF 0).
        cdf: cumulative probabilities in [0, 1], non-decreasing, same length as ``sizes``.
        interpolate: True = linear between points (HPCC), False = step (Homa).
        stated_mean_bytes: the mean written in the file (Homa first line), else None.
        pareto_tail: (k, sigma, cap_bytes) for a W1-style tail above the last point, else None.
    """

    name: str
    sizes: tuple[int, ...]
    cdf: tuple[float, ...]
    interpolate: bool
    stated_mean_bytes: float | None = None
    pareto_tail: tuple[float, float, int] | None = None

    def sample(self, rng: random.Random) -> int:
        """Draw one size in bytes (>= 1) by inverse transform with ``rng.random()``."""
        u = rng.random()
        return self.quantile(u)

    def quantile(self, u: float) -> int:
        """Size in bytes (>= 1) at cumulative probability ``u`` in [0, 1)."""
        sizes, cdf = self.sizes, self.cdf
        if self.pareto_tail is not None and u > cdf[-1]:
            k, sigma, cap = self.pareto_tail
            p_last = cdf[-1]
            size = round(sizes[-1] + (math.pow((1 - p_last) / (1 - u), k) - 1) * sigma / k)
            return max(1, min(cap, size))
        i = bisect.bisect_left(cdf, u)
        if i >= len(sizes):
            i = len(sizes) - 1
        if not self.interpolate or i == 0:
            return max(1, sizes[i])
        c0, c1 = cdf[i - 1], cdf[i]
        s0, s1 = sizes[i - 1], sizes[i]
        frac = 0.0 if c1 == c0 else (u - c0) / (c1 - c0)
        return max(1, round(s0 + frac * (s1 - s0)))

    def mean_bytes(self) -> float:
        """Analytic mean of :meth:`sample` (tail term: mean of the uncapped generalized Pareto,
        sigma/(1-k) above the last size; the 2^30 cap changes it by far less than 1%)."""
        sizes, cdf = self.sizes, self.cdf
        total = cdf[0] * sizes[0]
        for i in range(1, len(sizes)):
            p = cdf[i] - cdf[i - 1]
            total += p * ((sizes[i - 1] + sizes[i]) / 2 if self.interpolate else sizes[i])
        if self.pareto_tail is not None:
            k, sigma, _ = self.pareto_tail
            total += (1 - cdf[-1]) * (sizes[-1] + sigma / (1 - k))
        return total


def _parse_number(token: str, path: Path, line_no: int, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise InvalidInput(f"line {line_no}", f"{what} must be a number, got {token!r}", source=str(path)) from None
    if not math.isfinite(value):
        raise InvalidInput(f"line {line_no}", f"{what} must be finite, got {token!r}", source=str(path))
    return value


def load_distribution(path: str | Path, homa_packet_bytes: int = HOMA_MAX_DATA_BYTES_PER_PKT) -> SizeDistribution:
    """Read a flow-size CDF file (HPCC or Homa format, see module docstring).

    Args:
        path: the file; a bare name is looked up in the shipped data/flow-sizes/ directory.
        homa_packet_bytes: bytes per packet for the Homa W5 (DCTCP) file, > 0.

    Raises:
        InvalidInput: unreadable file or a malformed line (field ``line N``, source the file).
    """
    path = Path(path)
    if not path.is_absolute() and not path.exists() and (DATA_DIR / path).exists():
        path = DATA_DIR / path
    lines = read_text(path, "distribution").splitlines()
    if homa_packet_bytes <= 0:
        raise InvalidInput("homa_packet_bytes", f"must be > 0, got {homa_packet_bytes}", source=str(path))
    rows = [(n, ln.split()) for n, ln in enumerate(lines, start=1) if ln.strip()]
    if not rows:
        raise InvalidInput("line 1", "empty file: expected CDF lines `size cdf`", source=str(path))

    stated_mean: float | None = None
    homa = len(rows[0][1]) == 1
    if homa:
        line_no, tokens = rows[0]
        stated_mean = _parse_number(tokens[0], path, line_no, "mean message size")
        rows = rows[1:]
    scale_cdf = 1.0 if homa else 100.0  # HPCC files give percent
    in_packets = homa and "DCTCP" in path.name
    is_w1 = homa and "FacebookKeyValue" in path.name
    size_factor = homa_packet_bytes if in_packets else 1
    if stated_mean is not None:
        stated_mean *= size_factor

    sizes: list[int] = []
    cdf: list[float] = []
    for line_no, tokens in rows:
        if len(tokens) != 2:
            raise InvalidInput(f"line {line_no}", f"expected two numbers `size cdf`, got {len(tokens)} fields",
                               source=str(path))
        size_f = _parse_number(tokens[0], path, line_no, "size")
        p = _parse_number(tokens[1], path, line_no, "cdf") / scale_cdf
        if size_f != int(size_f):
            raise InvalidInput(f"line {line_no}", f"size must be a whole number of bytes, got {tokens[0]}",
                               source=str(path))
        size = int(size_f) * size_factor
        if size < 0 or (size == 0 and (sizes or p > 0)):
            raise InvalidInput(f"line {line_no}", f"size must be > 0 bytes (0 only as a first point with cdf 0), "
                               f"got {tokens[0]}", source=str(path))
        if not 0.0 <= p <= 1.0 + CDF_TOLERANCE:
            limit = "0..1" if homa else "0..100 (percent)"
            raise InvalidInput(f"line {line_no}", f"cdf must be in {limit}, got {tokens[1]}", source=str(path))
        if sizes and size <= sizes[-1]:
            raise InvalidInput(f"line {line_no}", f"sizes must increase: {tokens[0]} after {sizes[-1] // size_factor}",
                               source=str(path))
        if cdf and p < cdf[-1]:
            raise InvalidInput(f"line {line_no}", f"CDF is not monotone: {tokens[1]} after a larger value",
                               source=str(path))
        sizes.append(size)
        cdf.append(min(p, 1.0))
    if not sizes:
        raise InvalidInput("line 2", "no `size cdf` lines after the mean", source=str(path))

    tail = None
    if abs(cdf[-1] - 1.0) > CDF_TOLERANCE:
        if not is_w1:
            raise InvalidInput(f"line {rows[-1][0]}", f"CDF must end at {'1' if homa else '100'}, "
                               f"got {rows[-1][1][1]}", source=str(path))
        tail = (W1_PARETO_K, W1_PARETO_SIGMA, W1_MAX_BYTES)
    else:
        cdf[-1] = 1.0
    return SizeDistribution(name=path.name, sizes=tuple(sizes), cdf=tuple(cdf), interpolate=not homa,
                            stated_mean_bytes=stated_mean, pareto_tail=tail)


def shipped_distributions() -> list[str]:
    """File names of the shipped flow-size distributions."""
    return sorted(p.name for p in DATA_DIR.glob("*.txt"))

"""D2TCP host transport (Vamanan, Hasan, Vijaykumar, "Deadline-Aware Datacenter TCP (D2TCP)",
SIGCOMM 2012).

D2TCP is DCTCP (:mod:`safs.hosts.dctcp`) with one change, the paper's gamma
correction of the window decrease (Section 3.1, "D2TCP's congestion avoidance algorithm"):

- penalty p = alpha^d, where alpha is DCTCP's moving average of the marked fraction and d the
  deadline imminence factor;
- on an ECN-marked window: cwnd <- cwnd * (1 - p/2) (DCTCP is the case d = 1); unmarked
  windows grow as in DCTCP.

Since alpha is in [0, 1], a near-deadline flow (d > 1) gets p < alpha and backs off less, a
far-deadline flow (d < 1) gets p > alpha and backs off more.

d = Tc / D (Section 3.1): Tc is the time the flow still needs under deadline-agnostic
(DCTCP) behaviour, Tc = B / ((3/4) W) round trips, with B the bytes still to send and W the
current window: the window follows TCP's sawtooth between W/2 and W, so it averages 3/4 of W
per round trip. D is the time left to the deadline. This model counts B as the unacknowledged
bytes and turns round trips into ns with SRTT (the RFC 6298 estimate DCTCP keeps anyway):
Tc = B * SRTT / (0.75 * cwnd). d is clamped to [0.5, 2] (the paper's bounds, Section 3.1,
which keep the penalty between alpha^2 and alpha^0.5, so no flow starves or floods).
Flows without a deadline, flows already past it, and flows with no RTT sample yet use d = 1
(plain DCTCP).

The receiver is DCTCP's (:class:`safs.hosts.dctcp.DctcpReceiver`); D2TCP changes
only the sender.
"""

from __future__ import annotations

from collections.abc import Callable

from safs.core.errors import InvalidInput
from safs.hosts.dctcp import DctcpConfig, DctcpSender
from safs.hosts.env import Clock, HostPort
from safs.hosts.stats import TransportStats

D2TCP_D_MIN = 0.5  # D2TCP paper, Section 3.1: lower bound of the imminence factor d
D2TCP_D_MAX = 2.0  # ... and its upper bound
D2TCP_AVG_WINDOW = 0.75  # D2TCP paper, Section 3.1: Tc = B / ((3/4) W), TCP's sawtooth average


def imminence_factor(remaining_bytes: int, cwnd_bytes: float, srtt_ns: int, time_left_ns: int) -> float:
    """Deadline imminence factor d = Tc / D, clamped to [0.5, 2] (D2TCP paper, Section 3.1).

    Args:
        remaining_bytes: bytes not yet acknowledged (>= 0).
        cwnd_bytes: current congestion window in bytes (> 0).
        srtt_ns: smoothed RTT in ns; 0 = no sample yet.
        time_left_ns: D, ns until the deadline (<= 0: deadline reached or passed).

    Returns:
        d in [0.5, 2]; 1.0 (plain DCTCP) when the deadline is past or no RTT is known yet.
        Tc = remaining_bytes * srtt_ns / (0.75 * cwnd_bytes): time to finish at the average
        window of DCTCP's sawtooth, 3/4 of the current one per RTT (paper, Section 3.1).

    Raises:
        InvalidInput: ``remaining_bytes`` negative or ``cwnd_bytes`` not positive.
    """
    if remaining_bytes < 0:
        raise InvalidInput("remaining_bytes", f"must be >= 0 bytes, got {remaining_bytes!r}")
    if not cwnd_bytes > 0:
        raise InvalidInput("cwnd_bytes", f"must be > 0 bytes, got {cwnd_bytes!r}")
    if time_left_ns <= 0 or srtt_ns <= 0:
        return 1.0
    d = remaining_bytes * srtt_ns / (D2TCP_AVG_WINDOW * cwnd_bytes * time_left_ns)
    return min(max(d, D2TCP_D_MIN), D2TCP_D_MAX)


def gamma_penalty(alpha: float, d: float) -> float:
    """D2TCP penalty p = alpha^d (paper, Section 3.1); the cut is cwnd * (1 - p/2).

    Args:
        alpha: DCTCP's marked-fraction average, in [0, 1].
        d: imminence factor, in [0.5, 2].

    Raises:
        InvalidInput: ``alpha`` outside [0, 1] or ``d`` outside [0.5, 2].
    """
    if not 0.0 <= alpha <= 1.0:
        raise InvalidInput("alpha", f"must be in [0, 1], got {alpha!r}")
    if not D2TCP_D_MIN <= d <= D2TCP_D_MAX:
        raise InvalidInput("d", f"must be in [{D2TCP_D_MIN}, {D2TCP_D_MAX}], got {d!r}")
    return alpha ** d


class D2tcpSender(DctcpSender):
    """Sender side of one D2TCP flow: :class:`DctcpSender` with the gamma-corrected cut.

    Args:
        engine, host, dst_ip, flow_id, size_bytes, config, stats, on_closed: as
            :class:`DctcpSender`.
        deadline_ns: the flow's deadline in simulation ns (the pipeline flow's no-bubble
            timestamp), or None: no deadline, behaves as DCTCP.

    Attributes (besides DCTCP's): ``deadline_ns``; ``last_d``, the d of the latest cut (1.0
    before any).

    Raises:
        InvalidInput: ``deadline_ns`` not an integer >= 0 or None; DCTCP's checks.
    """

    __slots__ = ("deadline_ns", "last_d")

    def __init__(self, engine: Clock, host: HostPort, dst_ip: int, flow_id: int, size_bytes: int | None,
                 config: DctcpConfig, stats: TransportStats, on_closed: Callable[[int], None],
                 deadline_ns: int | None) -> None:
        if deadline_ns is not None and (isinstance(deadline_ns, bool) or not isinstance(deadline_ns, int)
                                        or deadline_ns < 0):
            raise InvalidInput("deadline_ns", f"must be an integer ns >= 0 or None, got {deadline_ns!r}")
        super().__init__(engine, host, dst_ip, flow_id, size_bytes, config, stats, on_closed)
        self.deadline_ns = deadline_ns
        self.last_d = 1.0

    def imminence(self) -> float:
        """d for the current state (remaining = size - snd_una, cwnd, SRTT, deadline - now)."""
        if self.deadline_ns is None:
            return 1.0
        return imminence_factor(self.size - self.snd_una, self.cwnd, self.srtt,
                                self.deadline_ns - self.engine.now)

    def _ecn_penalty(self) -> float:
        d = self.imminence()
        self.last_d = d
        return gamma_penalty(self.alpha, d)

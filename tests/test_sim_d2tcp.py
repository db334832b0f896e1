"""D2TCP baseline: gamma-correction math, the sender hook, a deadline fan-in against DCTCP,
determinism, and bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from star import AllAtZero, star  # the shared one-switch test topology

from safs.core.errors import InvalidInput
from safs.experiments.policies import POLICIES
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Host
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec
from safs.hosts.d2tcp import D2TCP_D_MAX, D2TCP_D_MIN, D2tcpSender, gamma_penalty, imminence_factor
from safs.hosts.dctcp import DctcpConfig, DctcpSender
from safs.hosts.stats import TransportStats

US = 1_000


# ---- gamma correction math ----------------------------------------------------------------

def test_imminence_is_tc_over_d_inside_the_bounds() -> None:
    # 1 MB left, 100 kB window (75 kB per RTT on average), 10 µs RTT -> Tc = 133.3 µs;
    # D = 160 µs -> d = 0.833; D = 80 µs -> d = 1.667
    assert imminence_factor(1_000_000, 100_000.0, 10 * US, 160 * US) == pytest.approx(1e6 / 75e3 * 10 / 160)
    assert imminence_factor(1_000_000, 100_000.0, 10 * US, 80 * US) == pytest.approx(1e6 / 75e3 * 10 / 80)


def test_imminence_is_clamped_and_falls_back_to_one() -> None:
    assert imminence_factor(10**9, 9000.0, 10 * US, 1 * US) == D2TCP_D_MAX == 2.0
    assert imminence_factor(1, 10**6, 10 * US, 10**9) == D2TCP_D_MIN == 0.5
    assert imminence_factor(1_000_000, 100_000.0, 10 * US, 0) == 1.0  # deadline reached
    assert imminence_factor(1_000_000, 100_000.0, 10 * US, -5 * US) == 1.0  # past it
    assert imminence_factor(1_000_000, 100_000.0, 0, 80 * US) == 1.0  # no RTT sample yet


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.01, 0.99), d_near=st.floats(1.0, 2.0), d_far=st.floats(0.5, 1.0))
def test_near_deadline_backs_off_less_on_the_same_marks(alpha: float, d_near: float, d_far: float) -> None:
    near, dctcp, far = gamma_penalty(alpha, d_near), gamma_penalty(alpha, 1.0), gamma_penalty(alpha, d_far)
    assert near <= dctcp <= far
    assert dctcp == alpha  # d = 1 is DCTCP
    assert math.isclose(near, alpha ** d_near) and math.isclose(far, alpha ** d_far)
    cwnd = 100_000.0
    assert cwnd * (1 - near / 2) >= cwnd * (1 - far / 2)
    if d_near > d_far + 1e-6:
        assert near < far


@settings(max_examples=200, deadline=None)
@given(remaining=st.integers(0, 10**10), cwnd=st.floats(1.0, 1e8), srtt=st.integers(0, 10**8),
       left=st.integers(-10**9, 10**10))
def test_imminence_always_within_bounds(remaining: int, cwnd: float, srtt: int, left: int) -> None:
    d = imminence_factor(remaining, cwnd, srtt, left)
    assert D2TCP_D_MIN <= d <= D2TCP_D_MAX


def test_bad_math_input_names_the_field() -> None:
    for args, name in (((-1, 1.0, 1, 1), "remaining_bytes"), ((1, 0.0, 1, 1), "cwnd_bytes")):
        with pytest.raises(InvalidInput) as err:
            imminence_factor(*args)
        assert err.value.field == name
    for args, name in (((1.5, 1.0), "alpha"), ((-0.1, 1.0), "alpha"), ((0.5, 0.4), "d"), ((0.5, 2.1), "d")):
        with pytest.raises(InvalidInput) as err:
            gamma_penalty(*args)
        assert err.value.field == name and "[" in err.value.message


# ---- the sender ----------------------------------------------------------------------------

def _sender(engine: Engine, deadline: int | None, cls: type = D2tcpSender) -> DctcpSender:
    host = Host("h1", 0x0A000001)
    args = (engine, host, 0x0A000002, 1, 10_000_000, DctcpConfig(), TransportStats(), lambda fid: None)
    return cls(*args, deadline) if cls is D2tcpSender else cls(*args)


def test_sender_cut_uses_alpha_to_the_d() -> None:
    engine = Engine(1)
    near, far, none = _sender(engine, 50 * US), _sender(engine, 10**9), _sender(engine, None)
    dctcp = _sender(engine, None, DctcpSender)
    for s in (near, far, none, dctcp):
        s.alpha, s.cwnd, s.srtt = 0.3, 90_000.0, 10 * US
    assert near.imminence() == D2TCP_D_MAX  # 10 MB at 90 kB / 10 µs takes 1.1 ms, 50 µs left
    assert far.imminence() == D2TCP_D_MIN and none.imminence() == 1.0
    assert near._ecn_penalty() == pytest.approx(0.3 ** 2) and near.last_d == 2.0
    assert far._ecn_penalty() == pytest.approx(0.3 ** 0.5)
    assert none._ecn_penalty() == dctcp._ecn_penalty() == 0.3


def test_sender_refuses_bad_deadline() -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidInput) as err:
            _sender(Engine(1), bad)  # type: ignore[arg-type]
        assert err.value.field == "deadline_ns"


# ---- fan-in with staggered deadlines and bulk background -----------------------------------

# 5 µs links: RTT ~20 µs, so windows span many packets and the cut size matters
FAN_IN_LINKS = {"delay_ns": 5_000, "buffer_bytes": 4 << 20}


def fan_in(n: int = 6, size: int = 4_000_000, bulk: int = 2) -> list[FlowSpec]:
    """n 4 MB pipeline flows into h0, deadlines 2.0, 2.3, ... ms (fair sharing misses the
    first ones; serving by deadline could meet most), plus persistent bulk flows to h0."""
    specs = [FlowSpec(f"h{i + 1}", "h0", size, 2_000 * US + 300 * US * i, f"fan{i}") for i in range(n)]
    specs += [FlowSpec(f"h{n + 1 + j}", "h0", 1 << 34, None, f"bulk{j}", "background") for j in range(bulk)]
    return specs


def _run(policy: str, seed: int = 1):
    return simulate(star(9, **FAN_IN_LINKS), AllAtZero(fan_in()), policy, seed, SimConfig(max_time_ns=50_000 * US))


def test_d2tcp_is_registered() -> None:
    assert "d2tcp" in POLICIES and "dctcp" in POLICIES


def test_d2tcp_misses_no_more_deadlines_than_dctcp_on_fan_in() -> None:
    out = {}
    for policy in ("dctcp", "d2tcp"):
        res = _run(policy)
        assert res.workload_done
        fan = [f for f in res.flows if f.flow_class == "pipeline"]
        assert len(fan) == 6 and all(f.finish_ns is not None for f in fan)
        missed = sum(f.missed for f in fan)
        lateness = sum(max(0, f.finish_ns - f.no_bubble_ts_ns) for f in fan)  # type: ignore[operator]
        out[policy] = (missed, lateness, res)
    dctcp_missed, dctcp_late, dctcp_res = out["dctcp"]
    d2tcp_missed, d2tcp_late, d2tcp_res = out["d2tcp"]
    assert dctcp_missed >= 1  # the setup is tight enough that fair sharing misses
    assert d2tcp_missed <= dctcp_missed
    # the gamma correction moved bandwidth towards the earlier deadlines: less total lateness
    assert d2tcp_late < dctcp_late
    assert d2tcp_res.ecn_marked_packets > 0 and dctcp_res.ecn_marked_packets > 0
    assert d2tcp_res.control_bytes == 0  # no SAFS control traffic under d2tcp


def test_pipeline_flows_get_d2tcp_and_background_stays_dctcp() -> None:
    sim = Simulation(star(4, **FAN_IN_LINKS), "d2tcp", 1, SimConfig(max_time_ns=10 * US))
    specs = [FlowSpec("h1", "h0", 1_000_000, 500 * US, "p"),
             FlowSpec("h2", "h0", 1 << 34, None, "b", "background")]
    fids = [sim.start_flow(s, lambda t: None) for s in specs]
    pipe, bg = (sim.senders[f] for f in fids)
    assert type(pipe) is D2tcpSender and pipe.deadline_ns == 500 * US
    assert type(bg) is DctcpSender


def test_d2tcp_run_is_deterministic() -> None:
    a, b = _run("d2tcp", 3), _run("d2tcp", 3)
    assert a.flows == b.flows
    assert (a.events, a.drops, a.data_bytes, a.ecn_marked_packets, a.sim_time_ns) == \
           (b.events, b.drops, b.data_bytes, b.ecn_marked_packets, b.sim_time_ns)

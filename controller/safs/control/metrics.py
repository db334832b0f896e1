"""Prometheus metrics of a running controller (``safs controller --metrics-port``).

Read at scrape time (a prometheus-client custom collector), so nothing is kept twice:

* controller counters (:class:`~safs.control.controller.ControllerStats`): digests, rejected
  digests, ticks, tick failures, reconnects, pipelines kept, reconciliations and their repairs
  (``safs_controller_*_total``); with ``--state``, the state store's commits, committed
  changes and queue (``safs_state_*``);
* scheduler counters (:class:`~safs.core.scheduler.SchedulerStats`): table and meter updates
  written, write batches, encoded control bytes, grant changes, dependencies admitted, write
  failures (``safs_scheduler_*_total``);
* the switches' own telemetry, read over P4Runtime at scrape time, one Read per counter and
  switch: ``port_tx_bytes`` (bytes and packets sent per egress port) and ``ecn_marked``
  (packets marked CE per egress port), labelled ``switch`` and ``port`` (the topology's ports
  of that switch); ``safs_switch_up`` is 0 while a switch is down (its counters then hold the
  last value read); and per switch the packets its source guard dropped or demoted
  (``forged``, labelled ``reason`` by :class:`~safs.core.protocol.Forged`: spoofing, GRANTs
  from hosts, oversized or flooded control packets, DATA demoted for claiming a slack class
  no admitted dependency covers) and the malformed SAFS headers it saw (``malformed``);
* per switch: P4Runtime write calls, their updates and a histogram of their latency
  (``safs_switch_write_latency_seconds``); each receiver port's background share.

Scrapes take the controller's lock for the switch reads (as a tick does), so scrape every few
seconds, not faster than the tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from safs.control.controller import WRITE_LATENCY_BUCKETS_S, ControllerApp
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetConnectionError
from safs.core.protocol import Forged, Malformed

CONTROLLER_COUNTERS = (
    ("digests", "REQUEST digests received from switches"),
    ("digests_rejected", "digests the scheduler refused"),
    ("ticks", "scheduler ticks run"),
    ("tick_failures", "ticks or digest merges with refused writes or failed reads"),
    ("reconnects", "switches reconnected and re-installed"),
    ("reconnect_failures", "failed reconnection attempts"),
    ("pipelines_kept", "switches found running this pipeline (cookie) at connection: kept, not pushed"),
    ("takeovers", "times this backup became primary at every switch"),
    ("step_downs", "times this primary stepped back from all switches"),
    ("reconciliations", "switches read back and reconciled"),
    ("repairs_missing", "entities reconciliation wrote because a switch lacked them"),
    ("repairs_changed", "entities reconciliation rewrote because a switch held other content"),
    ("repairs_extra", "entities reconciliation deleted: stale, or written by another client"),
)
SCHEDULER_COUNTERS = (
    ("table_updates", "table entry updates written"),
    ("meter_updates", "meter config updates written"),
    ("batches", "P4Runtime write batches"),
    ("control_bytes", "estimated encoded bytes of the writes"),
    ("grant_changes", "grants the allocator changed"),
    ("dependencies", "dependencies admitted"),
    ("write_failures", "updates a switch refused after reconciliation"),
)


class ControllerCollector(Collector):
    """Collects ``app``'s counters and its switches' port telemetry at each scrape.

    Args:
        app: a started :class:`~safs.control.controller.ControllerApp`.
    """

    def __init__(self, app: ControllerApp) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        app = self.app
        for name, doc in CONTROLLER_COUNTERS:
            yield CounterMetricFamily(f"safs_controller_{name}", doc, value=getattr(app.stats, name))
        sched = app.scheduler
        if sched is not None:
            for name, doc in SCHEDULER_COUNTERS:
                yield CounterMetricFamily(f"safs_scheduler_{name}", doc, value=getattr(sched.stats, name))
            yield GaugeMetricFamily("safs_dependencies_active", "dependencies known now", value=len(sched.dependencies))
            yield GaugeMetricFamily("safs_flows_active", "per-transfer flow hints known now", value=len(sched.registry))
            share = GaugeMetricFamily("safs_port_background_share", "part of a receiver port kept from the "
                                      "dependencies' shares for traffic without a grant (adapted with --telemetry-s)",
                                      labels=["switch", "port"])
            for sw, port, _host in sched.receiver_ports():
                share.add_metric([sw, str(port)], sched.background_share(sw, port))
            yield share
        up = GaugeMetricFamily("safs_switch_up", "1 while the switch's P4Runtime connection is up", labels=["switch"])
        tx_bytes = CounterMetricFamily("safs_port_tx_bytes", "bytes sent per egress port (port_tx_bytes)",
                                       labels=["switch", "port"])
        tx_packets = CounterMetricFamily("safs_port_tx_packets", "packets sent per egress port (port_tx_bytes)",
                                         labels=["switch", "port"])
        ecn = CounterMetricFamily("safs_port_ecn_marked_packets", "packets marked CE per egress port (ecn_marked)",
                                  labels=["switch", "port"])
        qdepth = CounterMetricFamily("safs_port_enqueued_packets", "packets enqueued per egress port by the queue "
                                     "depth they met, bucket b: depth in [2^b - 1, 2^(b+1) - 1) (qdepth_hist)",
                                     labels=["switch", "port", "depth_bucket"])
        forged = CounterMetricFamily("safs_switch_forged_packets", "packets from host ports the source guard dropped "
                                     "(demoted: unclaimed_data) by reason (forged)", labels=["switch", "reason"])
        malformed = CounterMetricFamily("safs_switch_malformed_packets", "malformed SAFS headers by reason (malformed)",
                                        labels=["switch", "reason"])
        writes = CounterMetricFamily("safs_switch_writes", "P4Runtime write calls", labels=["switch"])
        updates = CounterMetricFamily("safs_switch_write_updates", "updates in those calls", labels=["switch"])
        latency = HistogramMetricFamily("safs_switch_write_latency_seconds", "P4Runtime write call latency",
                                        labels=["switch"])
        with app.lock:
            for sw, link in app.links.items():
                up.add_metric([sw], 0.0 if link.is_down else 1.0)
                writes.add_metric([sw], link.writes)
                updates.add_metric([sw], link.write_updates)
                buckets = [(floatToGoString(b), c) for b, c in zip(WRITE_LATENCY_BUCKETS_S, link.write_latency_counts)]
                latency.add_metric([sw], [*buckets, ("+Inf", link.writes)], sum_value=link.write_seconds)
                ports = sorted(app.topology.ports(sw))
                cells = [p * n.QDEPTH_BUCKETS + b for p in ports for b in range(n.QDEPTH_BUCKETS)]
                try:
                    sent = link.read_counter_cells(n.PORT_TX_BYTES, ports)
                    marked = link.read_counter_cells(n.ECN_MARKED, ports)
                    hist = link.read_counter_cells(n.QDEPTH_HIST, cells)
                    dropped = link.read_counter_cells(n.FORGED, [int(r) for r in Forged])
                    bad = link.read_counter_cells(n.MALFORMED, [int(r) for r in Malformed])
                except TargetConnectionError:
                    continue  # the link marked itself down; the next scrape tries again
                for port, s, m in zip(ports, sent, marked):
                    tx_bytes.add_metric([sw, str(port)], s.byte_count)
                    tx_packets.add_metric([sw, str(port)], s.packet_count)
                    ecn.add_metric([sw, str(port)], m.packet_count)
                for reason, c in zip(Forged, dropped):
                    forged.add_metric([sw, reason.name.lower()], c.packet_count)
                for why, c in zip(Malformed, bad):
                    malformed.add_metric([sw, why.name.lower()], c.packet_count)
                for cell, h in zip(cells, hist):
                    qdepth.add_metric([sw, str(cell // n.QDEPTH_BUCKETS), str(cell % n.QDEPTH_BUCKETS)],
                                      h.packet_count)
        yield GaugeMetricFamily("safs_controller_primary", "1 while this controller is primary, 0 as a backup",
                                value=1.0 if app.role == "primary" else 0.0)
        calls = CounterMetricFamily("safs_hint_calls", "hint API calls by method and status code (OK: accepted)",
                                    labels=["method", "code"])
        counter = app.hint_server.servicer.counter if app.hint_server is not None else None
        for (method, code), count in sorted(counter.calls.items() if counter is not None else []):
            calls.add_metric([method, code], count)
        yield calls
        store = app.store
        if store is not None:
            yield CounterMetricFamily("safs_state_commits", "state store transactions committed",
                                      value=store.stats.commits)
            yield CounterMetricFamily("safs_state_records", "state changes committed", value=store.stats.records)
            yield GaugeMetricFamily("safs_state_pending", "state changes queued, not yet committed",
                                    value=store.pending)
        yield up
        yield tx_bytes
        yield tx_packets
        yield ecn
        yield qdepth
        yield forged
        yield malformed
        yield writes
        yield updates
        yield latency


def parse_metrics_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of ``--metrics-addr`` (port 0..65535; 0: any free port).

    Raises:
        InvalidInput: not HOST:PORT (field ``--metrics-addr``).
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput("--metrics-addr", f"expected HOST:PORT with a port in 0..65535, got {text!r}")
    return host, int(port)


def serve_metrics(app: ControllerApp, host: str, port: int) -> Any:
    """Serve ``app``'s metrics (its own registry) over HTTP in a daemon thread; returns the
    server (``shutdown()`` stops it; ``server_address`` is where it listens).

    Raises:
        InvalidInput: the address cannot be bound (field ``--metrics-addr``).
    """
    registry = CollectorRegistry()
    registry.register(ControllerCollector(app))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise InvalidInput("--metrics-addr", f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return server

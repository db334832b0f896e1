"""Packet-level discrete-event simulator of a SAFS fabric (integer nanoseconds, deterministic per seed)."""

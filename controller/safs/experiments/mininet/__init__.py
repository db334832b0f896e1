"""Mininet run backend: the emulated network (BMv2 switches, host namespaces), the real-time
run driver and the agent control protocol (docs/mininet.md)."""

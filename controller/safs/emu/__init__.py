"""Host side of the Mininet/BMv2 emulation: the per-host agent (SAFS and TCP transports, control socket)."""

"""Where ``safs run --target`` runs scenarios (a module of its own so the command line can list
them without importing the simulator)."""

BACKENDS = ("sim", "mininet")  # mininet: docs/mininet.md

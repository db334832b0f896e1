"""Apps tier: processes a user starts: the ``safs`` command line (run, eval, controller) and the
Mininet host agent (``python -m safs.apps.agent``)."""

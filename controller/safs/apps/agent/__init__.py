"""The SAFS host agent: one process per emulated host (``python -m safs.apps.agent``)."""

"""Test doubles that ship with the package: an in-process P4Runtime server that answers like
BMv2's PI (:mod:`~safs.testing.fake_p4rt`). Imports :mod:`safs.core` and :mod:`safs.targets`."""

"""Failpoints: named places where a test can make the controller die as a crash would.

``SAFS_FAILPOINT=<name>`` in the environment of a ``safs controller`` process makes the first
:func:`failpoint` call with that name send the process SIGKILL (no cleanup, no flush: what a
power cut or an OOM kill leaves). Unset (always, outside tests) a failpoint is one dictionary
lookup. The names, in the order a hint passes them (docs/operations.md):

* ``store.before-commit``: the hint is queued for the database, not committed;
* ``store.after-commit``: committed, not acknowledged, not on the switch;
* ``hint.after-switch-write``: committed and written to the switch, not acknowledged.

(The same idea as etcd's gofail or FreeBSD's fail points, for one process.)
"""

from __future__ import annotations

import os
import signal

ENV = "SAFS_FAILPOINT"
_ARMED = os.environ.get(ENV, "")


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if ``SAFS_FAILPOINT`` named ``name`` when it started."""
    if _ARMED and _ARMED == name:
        os.kill(os.getpid(), signal.SIGKILL)

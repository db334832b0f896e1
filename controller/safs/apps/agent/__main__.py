"""``python -m safs.apps.agent``: run the host agent (:func:`safs.apps.agent.main.main`)."""

import sys

from safs.apps.agent.main import main

sys.exit(main())

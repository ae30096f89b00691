"""`python -m vigil.worker …`: the same as `vigil worker …`."""

import sys

from vigil.worker.command import main

sys.exit(main())

"""``python -m resumable``: the same CLI as the ``resumable`` command."""

import sys

from .cli import main

sys.exit(main())

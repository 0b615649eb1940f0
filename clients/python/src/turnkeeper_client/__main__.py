"""`python -m turnkeeper_client` runs the `turnkeeper` CLI."""

import sys

from .cli import main

sys.exit(main())

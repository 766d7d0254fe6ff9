"""``python -m layersearch`` runs the CLI."""

import sys

from layersearch.cli import main

sys.exit(main())

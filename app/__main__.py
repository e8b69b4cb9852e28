"""``python -m app`` does what the ``simile`` command does."""

import sys

from app.cli import main

sys.exit(main())

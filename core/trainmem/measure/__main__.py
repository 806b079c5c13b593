"""``python -m trainmem.measure``: see :mod:`trainmem.measure.cli`."""

from .cli import main

raise SystemExit(main())

"""``python -m trainmem``: the command line."""

from .cli import main

raise SystemExit(main())

"""``python -m leasefence.bench [--quick] [--json] [--out FILE]``."""

from leasefence.bench import main

raise SystemExit(main())

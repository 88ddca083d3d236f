"""``python -m leasefence_tools.bench [--quick] [--json] [--out FILE]``."""

from leasefence_tools.bench import main

raise SystemExit(main())

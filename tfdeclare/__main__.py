"""``python -m tfdeclare`` is the same as the ``tfdeclare`` command."""

from tfdeclare.cli.main import main

raise SystemExit(main())

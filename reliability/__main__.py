"""``python -m reliability``: run the reliability scenarios and print the table."""

from reliability.run import main

raise SystemExit(main())

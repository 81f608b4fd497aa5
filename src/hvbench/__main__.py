"""``python -m hvbench`` is the ``hvbench`` command."""

from hvbench.cli import main

main()

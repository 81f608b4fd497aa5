"""hvbench: measure what a virtualization platform costs, against the same host running natively.

The public API is small on purpose (as pyperf's): load a study, run it, open a store.
Everything else lives in private-by-convention modules that may change between versions.

Importing hvbench fixes the locale of every program it starts (``toolenv``): whoever imported
it, the command line, a program of one's own or a test, its tools' output parses.
"""

from hvbench import toolenv

toolenv.fix()

__version__ = "0.1.0"

RESULT_FORMAT = 1
"""Version of the result format (store schema and JSON exports); bumped on incompatible change."""

"""The systems under test written here, copied onto the nodes and run there: the reference
safekeeper cluster's daemons (walkeeper), the Manatee sitters (manatee) and the Tarantool node
scripts (qsync). They never import the harness; the harness reads their files to copy them and
imports of them only the lists of planted bugs.
"""

from pathlib import Path

ROOT = Path(__file__).parent

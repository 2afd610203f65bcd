"""How scripts/test spreads the suite over two pytest-xdist workers (`-n 2 --dist loadgroup`).

A unit of work is a test module, so a module-scoped fixture (a broker or a cluster a module shares)
is set up on one worker only, as in a run on one process; a JVM family is one unit across its
modules, so the run still starts one Spark and not one per worker. The longest units go first: the
other worker takes the many short modules meanwhile, and both end at about the same time.

xdist's own loadgroup reads `xdist_group` marks through a suffix it writes into each test's node id,
which pytest 9.2's structured node ids no longer carry; the controller sees node ids only, so the
families are named here by path.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Modules sharing a session JVM, by path prefix: the pipeline's tests share one SparkSession (the
# `spark` fixture; test_pipeline_cli's own spark-submit is run on the same worker, not at the same time).
FAMILIES = {"tests/pipeline/": "spark"}

# Units started first, longest first (about a minute or more each on 2 cores); the rest in xdist's
# order (most tests first).
FIRST = ("spark", "tests/conformance/test_conformance.py", "tests/clients/test_interop_java.py",
         "tests/transactions/test_java.py", "tests/clients/test_streams.py", "tests/clients/test_idempotence.py")


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its family, else its module."""
    path = nodeid.split("::", 1)[0]
    return next((family for prefix, family in FAMILIES.items() if path.startswith(prefix)), path)


class FamilyScheduling(LoadScopeScheduling):
    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the queue is complete at the first assignment
            self._ordered = True
            for unit in reversed(FIRST):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
        super()._assign_work_unit(node)

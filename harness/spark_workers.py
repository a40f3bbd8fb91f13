"""The daemon of the Python workers that a local Spark starts for the checkers' per-key passes.

Spark puts its pyspark.zip and py4j zip first on its workers' path, and a zip holds no compiled
bytecode: every worker compiled the pyspark modules it imports from source, about 0.6 CPU-s a
worker on every check. The same pyspark is installed, compiled, among the harness's packages, so
this daemon moves the zips to the end of the path (a fallback) before it runs pyspark's own
daemon, whose workers inherit the path.

It lives in `harness`, whose package imports nothing: the checkers package imports pyspark, which
would then come from the zips.
"""

import sys


def zips_last(path: list[str]) -> list[str]:
    """`path` with Spark's zips (pyspark.zip, py4j-*.zip) moved to its end."""
    zips = [p for p in path if p.endswith(".zip") and "/pyspark/python/lib/" in p]
    return [p for p in path if p not in zips] + zips


if __name__ == "__main__":
    sys.path[:] = zips_last(sys.path)
    from pyspark.daemon import manager

    manager()

"""The judgments: each checker a function of a history's operations as plain data.

A library, as Elle is: `checkers.operations` pairs a history's events into operations (dicts of
`OP_COLUMNS`, values parsed), and each checker module's `check(ops, ...)` judges them without Spark
or pyarrow, returning at least `valid`, `anomaly_types` and `anomalies`. `checkers.spark` is the
plumbing that feeds the same judgments from Spark tables when a history is too large for one
process; importing this package imports neither.
"""

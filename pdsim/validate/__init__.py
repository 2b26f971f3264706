"""Simulated vs real: simulate a real run's requests one to one (align.py), compare per metric
(compare.py), report (report.py), and run the validation cases of ``validation/`` (suite.py)."""

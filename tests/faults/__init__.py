"""Fault scenarios shared by tests/test_faults.py and scripts/faults: run a real workload, break
something (the server, its backends, its connection slots, vacuum's horizon, the worker's pace),
then prove every job ended DONE or DEAD, none was lost and no attempt ran twice."""

"""Analysis, after the runs: the report of one or more runs' training dynamics, the paper's plots
and tables (``report``); several seeds of a setting compared (``multi_seed``), each difference
with its confidence interval (``confidence``)."""

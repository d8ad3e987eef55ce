"""Analysis, after the runs: what one run's figures are, read from its files (``run_figures``),
which both of the others read; the report of one or more runs' training dynamics, the paper's
plots and tables (``report``); several seeds of a setting compared (``multi_seed``), each difference
with its confidence interval (``confidence``); the markdown tables they print (``markdown``)."""

"""Configuration: the recipes' command line and error printing (``cli``), the checks a config
passes before any compute (``check``), each recipe's keys (``schemas``), and the configs written
from others (``derive``, the table ``derived_configs``; ``python scripts/make_configs.py``). What
`tune run` changes as it starts is in ``entrodrop.launch``."""

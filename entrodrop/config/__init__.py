"""Configuration: the recipes' command line and error printing (``cli``), the checks a config
passes before any compute (``check``), and each recipe's keys (``schemas``). What `tune run`
changes as it starts is in ``entrodrop.launch``."""

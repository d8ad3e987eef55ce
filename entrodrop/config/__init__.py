"""Configuration: the recipes' command line and error printing (``cli``), the checks a config
passes before any compute (``check``), and each recipe's keys (``schemas``); what `tune run`
changes as it starts (``tune_run``: a recipe given by any path, run by ``run_recipe_file``;
Ctrl-C outside a recipe's main)."""

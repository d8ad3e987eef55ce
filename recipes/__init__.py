# The recipes are scripts run with `tune run recipes/<name>.py`; this file makes `recipes`
# a package so `tune run` (which imports `recipes.<name>`) finds ours before the `recipes`
# package torchtune 0.6.1 installs. See README, "Why `make` links the repo into the venv".

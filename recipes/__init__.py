# Makes `recipes` a package, so that tests and scripts run from the checkout root import
# `recipes.<name>` from here (the working directory is first on their sys.path). `tune run
# recipes/<name>.py` does not import it: it runs the file (entrodrop/launch/run_recipe_file.py).

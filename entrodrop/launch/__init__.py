"""Starting recipes: the `tune run` start-up hook, the file runner torchrun starts, and a worker's tie to its launcher."""

"""Files on disk: one live writer per folder, and temporary paths renamed into place with the umask's mode."""

"""The method: each token's contextual entropy under the base model (``entropy``), the token
dropout that gates on it and its baselines (``dropout``), and the gate driven by the model's own
training loss instead (``loss_signal``)."""

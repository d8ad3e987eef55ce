"""The model families a checkpoint may hold (``families.FAMILIES``), the model builders torchtune
0.6.1 lacks (``entrodrop.models.qwen3``) and the checkpoint ``config.json`` helpers; Llama3.1
comes from ``torchtune.models.llama3_1``."""

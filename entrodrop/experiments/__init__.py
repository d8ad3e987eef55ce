"""The experiments the project ships, as plans of stages and runs: the demo (`make demo`,
``demo``) and the reproduction of the paper's tables with several seeds (`make reproduce`,
``reproduce``). scripts/demo.py and scripts/reproduce.py run them; a benchmark may time them."""

"""`make reproduce`: tables 3 and 4 of the paper at CPU scale, every setting with several seeds
(entrodrop/experiments/reproduce.py says what it runs).

    python scripts/reproduce.py            (what `make reproduce` runs: DEFAULT_SEEDS seeds a setting)
    SEEDS=10 python scripts/reproduce.py   (seeds 0 to 9 of every setting)
    RESUME=1 python scripts/reproduce.py   (continue: skip the runs and stages a stopped call finished)
    DEVICE=cpu python scripts/reproduce.py (the CPU where torch sees a GPU)
    REGIME=premise python scripts/reproduce.py (the premise regime: its own base, six settings)
"""

from entrodrop.experiments.reproduce import main

if __name__ == "__main__":
    main()

"""`make demo`: the main job, offline (entrodrop/experiments/demo.py says what it runs).

    python scripts/demo.py            (what `make demo` runs)
    DEVICE=cpu python scripts/demo.py (the CPU version on any machine)
    RESUME=1 python scripts/demo.py   (continue: skip the stages a killed demo finished)
"""

from entrodrop.experiments.demo import main

if __name__ == "__main__":
    main()

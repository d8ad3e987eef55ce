"""`make reproduce`: tables 3 and 4 of the paper at CPU scale, every setting with several seeds
(entrodrop/experiments/reproduce.py says what it runs).

    python scripts/reproduce.py                    (what `make reproduce` runs: DEFAULT_SEEDS seeds a setting)
    python scripts/reproduce.py --seeds 10         (seeds 0 to 9 of every setting; Make's SEEDS=10)
    python scripts/reproduce.py --resume           (continue: skip the runs and stages a stopped call finished; RESUME=1)
    python scripts/reproduce.py --device cpu       (the CPU where torch sees a GPU; DEVICE=cpu)
    python scripts/reproduce.py --regime premise   (the premise regime: its own base, six settings; REGIME=premise)

Make's variables are the defaults: `SEEDS=10 make reproduce` and `make reproduce REGIME=premise`
reach here through the environment, which the library never reads.
"""

import argparse
import os

from entrodrop.experiments import reproduce


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", default=os.environ.get("REGIME") or None,
                        help=f"one of {', '.join(reproduce.REGIMES)} (default: Make's REGIME, else demo)")
    parser.add_argument("--device", default=os.environ.get("DEVICE", ""),
                        help="cpu or cuda (default: Make's DEVICE, else cuda where torch sees a GPU)")
    parser.add_argument("--seeds", default=os.environ.get("SEEDS") or None,
                        help=f"seeds 0 to N - 1 of every setting (default: Make's SEEDS, else {reproduce.DEFAULT_SEEDS})")
    parser.add_argument("--resume", action="store_true", default=os.environ.get("RESUME", "0") not in ("", "0"),
                        help="continue the runs and stages a stopped call finished (default: Make's RESUME)")
    args = parser.parse_args(argv)
    reproduce.main(args.regime, args.device, args.seeds, args.resume)


if __name__ == "__main__":
    main()

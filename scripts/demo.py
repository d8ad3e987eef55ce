"""`make demo`: the main job, offline (entrodrop/experiments/demo.py says what it runs).

    python scripts/demo.py                 (what `make demo` runs)
    python scripts/demo.py --device cpu    (the CPU version on any machine; Make's DEVICE=cpu)
    python scripts/demo.py --resume        (continue: skip the stages a killed demo finished; RESUME=1)

Make's variables are the defaults: `RESUME=1 make demo` and `make demo DEVICE=cpu` reach here
through the environment, which the library never reads.
"""

import argparse
import os

from entrodrop.experiments import demo


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=os.environ.get("DEVICE", ""),
                        help="cpu or cuda (default: Make's DEVICE, else the GPU version where torch sees a GPU)")
    parser.add_argument("--resume", action="store_true", default=os.environ.get("RESUME", "0") not in ("", "0"),
                        help="continue the stages a stopped call finished (default: Make's RESUME)")
    args = parser.parse_args(argv)
    demo.main(device=args.device, resume=args.resume)


if __name__ == "__main__":
    main()

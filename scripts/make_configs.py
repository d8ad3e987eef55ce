"""Write the configs derived from others (configs/tiny/, demo/, demo_gpu/, premise/, ablations/).

    python scripts/make_configs.py           # (re)write every derived config
    python scripts/make_configs.py --check   # write nothing; exit 1, naming each file that is out of date

Each derived config is its parent (a config a user copies, configs/qwen3/ or configs/llama3_1/)
with the keys its row in entrodrop/config/derived_configs.py changes. The YAML is edited as text,
so every comment of the parent - the documentation of its keys - stays word for word
(entrodrop/config/derive.py). To change a derived config, change its parent or its row and run
this script; never edit the generated file.
"""

import argparse
import sys
from pathlib import Path

from entrodrop.config.derive import generated, out_of_date
from entrodrop.config.derived_configs import DERIVED

REPO = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to read and write (default: this one)")
    args = parser.parse_args(argv)
    if not args.check:
        for path, text in generated(args.repo, DERIVED).items():
            path.write_text(text)
    problems = out_of_date(args.repo, DERIVED)  # after writing: the files that no row writes
    print("\n".join(problems), file=sys.stderr, end="\n" if problems else "")
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

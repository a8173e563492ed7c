#!/usr/bin/env bash
# Run on the H200 through the device tool, from the repository root, with .carry/ (built by
# benchmarks/h200_carry.sh) named in `carry`: install the carried nbgrader wheels and
# bubblewrap, record the machine's facts, then run pytest with the given arguments (or, after
# `--`, any command). Everything goes to $OUT/pytest.log as well as to the output.
#   bash benchmarks/h200_session.sh tests/gpu/test_adversarial_gpu.py -x
#   bash benchmarks/h200_session.sh -- python3 benchmarks/grading_times.py --out "$OUT/times.json"
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/site \
    .carry/whl/*.whl || exit 1
site=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib", vars={"base": "/tmp/site"}))')
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH" JUPYTER_PATH=/tmp/site/share/jupyter
export PYTHONUNBUFFERED=1
for deb in .carry/deb/*.deb; do dpkg -x "$deb" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH" LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, triton, nbgrader; print("torch", torch.__version__, "triton", triton.__version__, "nbgrader", nbgrader.__version__)'
  bwrap --version && bwrap --ro-bind / / --dev-bind /dev /dev --proc /proc --unshare-net true \
    && echo "bwrap works here"
  if [ "${1:-}" = "--" ]; then shift; "$@"
  # tee-sys: what a test prints shows as it runs, so a run its time limit cuts short still
  # shows the grade tables of the tests it finished
  else python3 -m pytest -p no:cacheprovider -rA --durations=0 --capture=tee-sys "$@"; fi
} 2>&1 | tee "$OUT/pytest.log"

# Sourced on the H200, from the repository root: `source benchmarks/h200_cutile_env.sh [DIR]`.
# DIR is one of the two folders benchmarks/h200_carry_cutile.sh built (.carry-ct1, .carry-ct2),
# carried by two calls back to back on a warm machine: each call's half is kept in /tmp/ctparts,
# and once both are there they are joined and unpacked into /tmp/ct. With no DIR (a later call
# on that machine) it uses /tmp/ct as it is. It puts the toolchain first on PYTHONPATH, PATH and
# LD_LIBRARY_PATH, the image's own nvidia/cu13 (CUDA 13.0) must not be the one cuda.tile finds,
# and prints the versions; with only the first half carried it says so and sets nothing.
if [ -n "${1:-}" ]; then
  mkdir -p /tmp/ctparts && cp "$1"/cutile-toolchain.part* /tmp/ctparts/
fi
if [ ! -x /tmp/ct/nvidia/cu13/bin/tileiras ] && [ -f /tmp/ctparts/cutile-toolchain.part2 ]; then
  mkdir -p /tmp/ct && cat /tmp/ctparts/cutile-toolchain.part1 /tmp/ctparts/cutile-toolchain.part2 \
    | tar -xJ -C /tmp/ct
fi
if [ -x /tmp/ct/nvidia/cu13/bin/tileiras ]; then
  export PYTHONPATH="/tmp/ct${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="/tmp/ct/nvidia/cu13/bin:$PATH"
  export LD_LIBRARY_PATH="/tmp/ct/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  python3 -c 'import importlib.metadata as m, cuda.tile; print("cuda-tile", m.version("cuda-tile"), "toolchain", m.version("nvidia-cuda-tileiras"))'
else
  echo "the cuTile toolchain is not complete in /tmp/ctparts yet: carry .carry-ct2 next"
fi

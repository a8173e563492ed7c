# Sourced on the H200, from the repository root: `source benchmarks/h200_cutile_env.sh DIR`, DIR
# the carried folder benchmarks/h200_carry_cutile.sh built (.carry-ct). Unpacks the cuTile
# toolchain into /tmp/ct, where a second call on the still-warm machine finds it without DIR
# (`source benchmarks/h200_cutile_env.sh`), and puts it first on PYTHONPATH, PATH and
# LD_LIBRARY_PATH: the image's own nvidia/cu13 (CUDA 13.0) must not be the one cuda.tile finds.
if [ ! -x /tmp/ct/nvidia/cu13/bin/tileiras ]; then
  mkdir -p /tmp/ct && tar -xJf "${1:?the carried folder, e.g. .carry-ct}/cutile-toolchain.tar.xz" -C /tmp/ct
fi
export PYTHONPATH="/tmp/ct${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/ct/nvidia/cu13/bin:$PATH"
export LD_LIBRARY_PATH="/tmp/ct/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 -c 'import importlib.metadata as m, cuda.tile; print("cuda-tile", m.version("cuda-tile"), "toolchain", m.version("nvidia-cuda-tileiras"))'

#!/usr/bin/env bash
# Build .carry-ct/ (git-ignored through .git/info/exclude) for a device call that runs cuTile on
# the H200: cuda-tile and the pip toolchain at CUTILE_TOOLCHAIN (default 13.4.*: the image's
# CUDA 13.0 ptxas and libnvvm fail on Hopper), cut to what cuda.tile loads (the packages
# cuda.tile and cutile_cache, tileiras, ptxas, libnvvm, libdevice and the three toolchain
# packages' metadata, which cuda.tile reads to find its compiler) and packed with xz: about 60 MB.
# With the working tree (14 MB on 2026-12-05) that passes a call's 64 MiB, so the archive is
# split in two halves, .carry-ct1/ and .carry-ct2/, carried by two calls back to back on a warm
# machine: `source benchmarks/h200_cutile_env.sh .carry-ct1` keeps the first half in
# /tmp/ctparts, the same with .carry-ct2 joins, unpacks into /tmp/ct and sets the environment
# (runs 61a-c); later calls on that machine source it with no folder, and may carry .carry/.
# Run here, from the repository root. Packing takes about 4 minutes on 2 cores.
set -euo pipefail
toolchain=${CUTILE_TOOLCHAIN:-13.4.*}
for folder in .carry-ct .carry-ct1 .carry-ct2; do
  grep -qx "/$folder/" .git/info/exclude 2>/dev/null || echo "/$folder/" >> .git/info/exclude
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$work/whl" cuda-tile \
    "nvidia-cuda-tileiras==$toolchain" "nvidia-cuda-nvcc==$toolchain" "nvidia-nvvm==$toolchain"
mkdir -p "$work/site" "$work/pack/nvidia/cu13/bin" "$work/pack/nvidia/cu13/lib" \
    "$work/pack/nvidia/cu13/nvvm"
for wheel in "$work"/whl/*.whl; do (cd "$work/site" && python3 -m zipfile -e "$wheel" .); done
cd "$work/site"
cp -a cuda cutile_cache cuda_tile-*.dist-info nvidia_cuda_tileiras-*.dist-info \
    nvidia_cuda_nvcc-*.dist-info nvidia_nvvm-*.dist-info "$work/pack/"
cp nvidia/cu13/bin/tileiras nvidia/cu13/bin/ptxas "$work/pack/nvidia/cu13/bin/"
chmod +x "$work/pack/nvidia/cu13/bin/"*
cp nvidia/cu13/lib/libnvvm.so.* "$work/pack/nvidia/cu13/lib/"
cp -a nvidia/cu13/nvvm/libdevice "$work/pack/nvidia/cu13/nvvm/"
cd - >/dev/null
rm -rf .carry-ct .carry-ct1 .carry-ct2 && mkdir -p .carry-ct .carry-ct1 .carry-ct2
tar -C "$work/pack" -cf - . | xz -9e -T2 > .carry-ct/cutile-toolchain.tar.xz
half=$(( ($(stat -c %s .carry-ct/cutile-toolchain.tar.xz) + 1) / 2 ))
split -b "$half" -a 1 .carry-ct/cutile-toolchain.tar.xz "$work/part."
mv "$work/part.a" .carry-ct1/cutile-toolchain.part1 && mv "$work/part.b" .carry-ct2/cutile-toolchain.part2
rm -r .carry-ct
du -sh .carry-ct1 .carry-ct2

#!/usr/bin/env bash
# Installs everything divsim needs to build, run and test on Debian 12 (root or sudo). Idempotent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
packages=(
  # build
  build-essential cmake pkg-config git
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools libeigen3-dev libboost-program-options-dev zlib1g-dev
  libgtest-dev
  # OpenBLAS for divsim's backward matrix products (CMake option DIVSIM_OPENBLAS)
  libopenblas-pthread-dev
  # data: Fashion-MNIST, and the fortunes as character sequences for the gpt model (data.source=fortunes)
  dataset-fashion-mnist fortunes
  # analysis, notebooks and the PyTorch reference peer (Debian's python3, not PyPI); OpenBLAS so torch
  # multiplies at a realistic rate
  python3 python3-h5py python3-numpy python3-pandas python3-matplotlib python3-pytest python3-torch
  libopenblas0-pthread python3-nbclient python3-ipykernel python3-nbformat
  # a real local Slurm for the job-script tests
  slurm-wlm munge
  # fuzzing and sanitizers
  clang libclang-rt-14-dev
)
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${packages[@]}"

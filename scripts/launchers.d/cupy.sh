# CuPy, from PyPI, for doctor's Python area (sourced by scripts/launchers):
# the newest cupy-cuda12x with the newest nvidia-nccl-cu12 in a venv of its
# own, made once (a .complete marker; about 860 MB with numpy and
# cuda-pathfinder). `from cupy.cuda import nccl` runs without a GPU: CuPy
# loads the wheel's libnccl.so.2 by path (cuda.pathfinder) before its NCCL
# extension, and the tests compare doctor's answer with what that maps.
#
#   NCCL_FIND_CUPY_PYTHON   its python

cupy_dir="$cache/launchers/cupy"
if [ ! -f "$cupy_dir/.complete" ]; then
  echo "scripts/launchers: installing cupy-cuda12x and nvidia-nccl-cu12 into $cupy_dir (once)" >&2
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install python3-venv
  fi
  rm -rf "$cupy_dir" && mkdir -p "$cache/launchers"
  "$python" -m venv "$cupy_dir"
  "$cupy_dir/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check \
    cupy-cuda12x nvidia-nccl-cu12 >&2
  # It must load NCCL through CuPy before it counts as installed.
  "$cupy_dir/bin/python" -W ignore -c \
    'from cupy.cuda import nccl; assert any("libnccl" in l for l in open("/proc/self/maps"))' >&2
  touch "$cupy_dir/.complete"
fi
say NCCL_FIND_CUPY_PYTHON "$cupy_dir/bin/python"
unset cupy_dir

# Sourced: makes CUDA's runtime compiler and cuBLAS findable when the loader's path does not have them. Safe under
# `set -euo pipefail` (test.sh): grep reads all of ldconfig's list (`-q` would close the pipe early and fail the
# pipeline by SIGPIPE), and a search that finds nothing is not an error.
for lib in libnvrtc.so libcublas.so; do
  if ! ldconfig -p 2>/dev/null | grep "$lib" >/dev/null; then
    d=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/python3*/site-packages/nvidia \
      /usr/local/lib/python3*/dist-packages/nvidia -name "$lib*" 2>/dev/null | head -1 | xargs -r dirname || true)
    if [ -n "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  fi
done
true

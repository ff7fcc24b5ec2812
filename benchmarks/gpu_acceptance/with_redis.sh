#!/usr/bin/env bash
# Device-tool helper: unpack the Debian redis packages carried in .debs/ (the GPU machine
# has no network) and put redis-server on PATH, then run the command given.
#   bash benchmarks/gpu_acceptance/with_redis.sh bash benchmarks/gpu_acceptance/run.sh ARGS...
set -eu
dest=/tmp/redis-deb
mkdir -p "$dest"
for deb in .debs/*.deb; do dpkg -x "$deb" "$dest"; done
export PATH="$dest/usr/bin:$PATH"
export LD_LIBRARY_PATH="$dest/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
redis-server --version
exec "$@"

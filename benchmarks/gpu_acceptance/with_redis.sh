#!/usr/bin/env bash
# Device-tool helper: unpack the Debian redis packages carried in .debs/ (the GPU machine
# has no network) and put redis-server on PATH, then run the command given.
#   bash benchmarks/gpu_acceptance/with_redis.sh bash benchmarks/gpu_acceptance/run.sh ARGS...
# Fill the ignored dirs first (here, with network): `apt-get download redis-server
# redis-tools libjemalloc2 liblzf1` into .debs/, `pip download --no-deps redis -d .whl`;
# carry [".whl", ".debs"]; on the device `pip install --no-index --no-deps --target
# /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site (the phase children import redis).
set -eu
dest=/tmp/redis-deb
mkdir -p "$dest"
for deb in .debs/*.deb; do dpkg -x "$deb" "$dest"; done
export PATH="$dest/usr/bin:$PATH"
export LD_LIBRARY_PATH="$dest/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
redis-server --version
exec "$@"

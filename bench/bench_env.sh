# Sourced by the bench/*.sh drivers: the repository root as working directory, the build and
# venv folders (BUILD_DIR, VESCALE_VENV), RUNS (default 3), and bench_build TARGET.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}
VENV=${VESCALE_VENV:-/opt/vescale/venv}
RUNS=${RUNS:-3}
bench_build() { ninja -C "$BUILD_DIR" "$1" >/dev/null; }

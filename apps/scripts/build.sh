#!/usr/bin/env bash
# Configures and builds mintrain with the "release" preset (CUDA parts when a toolkit is found).
# Usage: apps/scripts/build.sh [preset]   (presets: release, cpu, debug; see CMakePresets.json)
set -euo pipefail
cd "$(dirname "$0")/../.."
PRESET="${1:-release}"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j"$(nproc)"

#!/bin/sh
# Regenerates tests/apps/ (keras.applications models, see tools/apps/README.md).
#   tools/apps/make_apps.sh [NAME ...] [--tfjs-form]
# Needs Debian python3-numpy + python3-h5py (/usr/bin/python3) and node with
# tools/node_modules/@tensorflow/tfjs (scripts/deps.sh installs both).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/make_apps.py" "$@"

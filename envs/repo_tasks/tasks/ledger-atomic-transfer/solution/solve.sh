#!/bin/sh
# Harbor's oracle: apply the reference patch in the workspace.
cd /workspace
patch -p1 < "$(dirname "$0")/fix.patch"

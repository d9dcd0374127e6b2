#!/usr/bin/env bash
# The main job on the embedded default: a local Ray cluster of simulated accelerator nodes, each
# started from a bundled host snapshot through the RAY_START_HOOK path; prints the nodes with their
# resources and labels and places work by label. Extra arguments go to `ray-accel demo`.
. "$(dirname "$0")/env.sh" ray
exec ray-accel demo "$@"

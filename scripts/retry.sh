#!/usr/bin/env bash
# retry.sh SECONDS TRIES CMD...: runs CMD with a timeout, retrying on failure.
# Module downloads and package installs hang now and then; this keeps CI moving.
set -u
secs=$1 tries=$2; shift 2
for i in $(seq 1 "$tries"); do
  timeout "$secs" "$@" && exit 0
  rc=$?
  echo "retry.sh: attempt $i/$tries of '$*' failed (exit $rc)" >&2
  sleep $((i * 2))
done
exit 1

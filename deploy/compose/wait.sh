#!/usr/bin/env bash
# Waits until the cluster's demo job is agreed and running (3 steps past
# its start), then prints tmmu status. Gives up after $WAIT_SECONDS (180).
set -euo pipefail
cd "$(dirname "$0")"
# The operator's credentials, as paths (make secrets writes them).
export TMMU_CA_FILE=$PWD/secrets/ca.crt TMMU_TOKEN_FILE=$PWD/secrets/operator/api-token
export TMMU_COORDINATORS=https://127.0.0.1:18081,https://127.0.0.1:18082,https://127.0.0.1:18083
deadline=$((SECONDS + ${WAIT_SECONDS:-180}))
while :; do
  if st=$(bin/tmmu status -o json --timeout 5s 2>/dev/null) &&
     jq -e '.jobs[] | select(.name == "demo" and .agreed and .last_step >= 3)' <<<"$st" >/dev/null; then
    bin/tmmu status
    exit 0
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "the demo job did not reach agreement and 3 steps within ${WAIT_SECONDS:-180}s" >&2
    bin/tmmu status >&2 || true
    ${COMPOSE:-docker-compose} ps >&2 || true
    exit 1
  fi
  sleep 2
done

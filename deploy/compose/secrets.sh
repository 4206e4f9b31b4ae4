#!/usr/bin/env bash
# Writes secrets/*.env: random NATS passwords per role and the
# coordinators' API token. Existing files are kept.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p secrets
chmod 700 secrets
if [ -f secrets/nats.env ]; then exit 0; fi
rand() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
coord_pw=$(rand) worker_pw=$(rand) token=$(rand)
umask 077
printf 'NATS_COORDINATOR_PASSWORD=%s\nNATS_WORKER_PASSWORD=%s\n' "$coord_pw" "$worker_pw" > secrets/nats.env
printf 'TMMU_NATS_USER=coordinator\nTMMU_NATS_PASSWORD=%s\nTMMU_API_TOKEN=%s\n' "$coord_pw" "$token" > secrets/coordinator.env
printf 'TMMU_NATS_USER=worker\nTMMU_NATS_PASSWORD=%s\n' "$worker_pw" > secrets/worker.env
printf 'TMMU_TOKEN=%s\n' "$token" > secrets/operator.env
echo "secrets written to $(pwd)/secrets"

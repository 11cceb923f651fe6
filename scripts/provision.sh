#!/usr/bin/env bash
# Install the machine packages the tests start for real: etcd (API server storage), Prometheus
# (metrics queries, promtool) and Chromium (report pages). Idempotent: a no-op when present.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v prometheus >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
if ((${#need[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

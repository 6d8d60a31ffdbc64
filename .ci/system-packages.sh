#!/usr/bin/env bash
# Debian packages CI needs on a bare bookworm (python3 only): python3-venv (every Python
# tool lives in a venv), ca-certificates (pip and apt over HTTPS), prometheus + promtool
# (rule tests, the end-to-end Prometheus), openssl (TLS tests), curl, gcc and libc6-dev (the
# tests build a fake libnvidia-ml.so.1 in C), tmux (`top --watch` is tested in a real terminal),
# victoria-metrics (victoria-metrics, vmagent and vmalert: the central store of the many-clusters test),
# chromium (the node page at / is read by a real headless browser).
# Only what is missing is installed; a failure exits non-zero.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)
command -v cc >/dev/null || missing+=(gcc)
[[ -e /usr/include/stdio.h ]] || missing+=(libc6-dev)
command -v tmux >/dev/null || missing+=(tmux)
command -v victoria-metrics >/dev/null && command -v vmagent >/dev/null && command -v vmalert >/dev/null \
    || missing+=(victoria-metrics)
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
    echo "system-packages: installing ${missing[*]}" >&2
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
python3 --version
promtool --version 2>&1 | head -n 1

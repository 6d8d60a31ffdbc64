#!/usr/bin/env bash
# Fetches Debian trixie's promtool (built with Kubernetes service discovery, unlike
# bookworm's) into a cache folder and prints its path on stdout; everything else goes to
# stderr. bookworm's promtool rejects any config with kubernetes_sd_configs, so checking
# prometheus/prometheus-configmap.yaml needs this one. Runs fine on bookworm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${PGME_CI_CACHE:-/var/cache/pod-gpu-metrics-exporter-ci}/promtool-trixie
promtool="$cache/root/usr/bin/promtool"

if [[ -x "$promtool" ]] && "$promtool" --version >/dev/null 2>&1; then
    echo "$promtool"
    exit 0
fi

mirror=$(bash "$here/debian-mirror.sh")
work=$(mktemp -d /tmp/promtool-trixie.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A private apt state: the machine's own apt lists and sources stay untouched.
mkdir -p "$work/etc/sources.list.d" "$work/etc/preferences.d" "$work/lists/partial" \
         "$work/archives/partial" "$work/deb"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
    > "$work/etc/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/etc/sources.list"
    -o "Dir::Etc::SourceParts=$work/etc/sources.list.d"
    -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o "Dir::Cache::Archives=$work/archives"
    -o "APT::Get::List-Cleanup=0"
    -o "Acquire::Languages=none"
    # The temp folders are root's; without this apt warns that _apt cannot read them.
    -o "APT::Sandbox::User=root"
)
echo "promtool-trixie: fetching trixie's promtool from $mirror" >&2
apt-get "${apt_opts[@]}" update -q >&2
(cd "$work/deb" && apt-get "${apt_opts[@]}" download promtool >&2)

rm -rf "$cache.new"
mkdir -p "$cache.new/root"
dpkg-deb -x "$work"/deb/promtool_*.deb "$cache.new/root"
"$cache.new/root/usr/bin/promtool" --version >&2
rm -rf "$cache"
mv "$cache.new" "$cache"
echo "$promtool"

#!/usr/bin/env bash
# Proves `.ci/run` on a machine as bare as it gets: debootstraps Debian bookworm with python3
# only (minbase) into DIR, clones this repository's current branch into it, and runs .ci/run
# there as root in a chroot. Not part of CI; run it by hand (root, Debian, debootstrap):
#
#   sudo bash .ci/bare-bookworm.sh /var/tmp/bare-bookworm
#
# The chroot gets /proc, /sys and /dev from the host, a tmpfs /run, and its root bind-mounted
# on itself (containers/storage remounts / while unpacking image layers). /tmp stays on disk,
# as on a fresh bookworm. CA certificates the host adds locally (/usr/local/share/ca-certificates,
# e.g. a TLS-inspecting proxy's) are copied in, or pip could not reach PyPI.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: bare-bookworm.sh DIR}
branch=$(git -C "$root" rev-parse --abbrev-ref HEAD)

if [[ ! -x "$target/usr/bin/python3" ]]; then
    debootstrap --variant=minbase --include=python3 bookworm "$target" "$(bash "$root/.ci/debian-mirror.sh")"
fi
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$target/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$target/usr/local/share/ca-certificates/"
fi
cp /etc/resolv.conf "$target/etc/resolv.conf"
rm -rf "$target/root/src"
git clone -q --branch "$branch" "$root" "$target/root/src"

cleanup() {
    umount -R "$target/run" "$target/proc" 2>/dev/null || true
    umount -R "$target/sys" "$target/dev" 2>/dev/null || true
    umount "$target" 2>/dev/null || true
}
trap cleanup EXIT
mount --bind "$target" "$target"
mount -t proc proc "$target/proc"
mount --rbind /sys "$target/sys" && mount --make-rslave "$target/sys"
mount --rbind /dev "$target/dev" && mount --make-rslave "$target/dev"
mount -t tmpfs tmpfs "$target/run"

chroot "$target" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /root/src && bash .ci/run'

#!/usr/bin/env bash
# Builds the Dockerfile with podman on a locally made Debian base (no registry pulls, no
# network inside the build) and runs the image the way users do: the pod-resources folder
# mounted read-only, a simulated node behind it. Passes when /gpu/metrics answers with
# attributed samples and the container exits 0 on SIGTERM. Also checks `IMAGE demo`.
#
# Needs root and Debian (apt). Caches the Debian root filesystem tarball in
# $PGME_CI_CACHE (default /var/cache/pod-gpu-metrics-exporter-ci); container storage
# lives in a temporary folder removed at the end.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PGME_CI_CACHE:-/var/cache/pod-gpu-metrics-exporter-ci}
base_image=localhost/debian-py:bookworm
image=localhost/pod-gpu-metrics-exporter:ci
deadline_seconds=60
work=$(mktemp -d /tmp/pgme-image.XXXXXX)
name="pgme-ci-$$"
fake_pid=""
dcgm_url=""
# The host side runs Python in a venv of its own (Debian's system Python has neither pip
# nor grpc): it builds the wheels and runs the simulated node.
venv="$work/venv"

log() { echo "image.sh: $*" >&2; }

cleanup() {
    set +e
    podman rm -f -i "$name" "$name-demo" >/dev/null 2>&1
    buildah rm --all >/dev/null 2>&1
    podman rmi -a -f >/dev/null 2>&1
    if [[ -n "$fake_pid" ]]; then kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null; fi
    # Overlay mounts left by an interrupted build would make rm -rf fail.
    findmnt -rn -o TARGET | grep "^$work/" | sort -r | xargs -r umount -l 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

install_tools() {
    local missing=()
    for tool in buildah podman debootstrap runc curl; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            buildah podman debootstrap runc curl >&2
    fi
}

write_container_config() {
    # Private configuration: the machine's /etc/containers and /var/lib/containers stay
    # untouched, and cgroupfs/runc work without systemd.
    cat > "$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$work/libpod-tmp"
EOF
    cat > "$work/storage.conf" <<EOF
[storage]
driver = "overlay"
runroot = "$work/run"
graphroot = "$work/graph"
EOF
    export CONTAINERS_CONF="$work/containers.conf"
    export CONTAINERS_STORAGE_CONF="$work/storage.conf"
}

make_host_venv() {
    log "host venv with the project (wheel building, simulated node)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$root"
}

make_base_tarball() {
    # debootstrap takes about a minute; the tarball is reused by later runs.
    local tarball="$cache/debian-py-bookworm.tar"
    if [[ ! -s "$tarball" ]]; then
        local mirror rootfs="$work/rootfs"
        mirror=$(bash "$root/.ci/debian-mirror.sh")
        log "debootstrap bookworm from $mirror"
        mkdir -p "$cache"
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
            || { tail -n 30 "$work/debootstrap.log" >&2; return 1; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    podman import -q "$tarball" "$base_image" >/dev/null
}

build_wheels() {
    # The build runs with --network none, so every wheel comes from here: the project's
    # own wheel, then its dependencies for the base image's Python (not the host's).
    local ctx=$1 pyver arch
    pyver=$(podman run --rm --network none "$base_image" \
        python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    arch=$(uname -m)
    # Built from the copy: setuptools leaves build/ and *.egg-info/ beside the sources.
    "$venv/bin/pip" wheel -q --no-deps --wheel-dir "$ctx/wheels" "$ctx" >&2
    "$venv/bin/pip" download -q --only-binary=:all: --dest "$ctx/wheels" \
        --python-version "$pyver" --implementation cp \
        --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" \
        --platform "manylinux2014_$arch" --platform "manylinux1_$arch" \
        "$ctx"/wheels/pod_gpu_metrics_exporter-*.whl >&2
}

build_image() {
    local ctx="$work/context"
    mkdir -p "$ctx"
    # A copy of the work tree, so the wheels/ folder never lands in the repository.
    tar -C "$root" --exclude=./.git --exclude=./wheels --exclude=./.venv --exclude=./build \
        --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis \
        -cf - . | tar -C "$ctx" -xf -
    build_wheels "$ctx"
    log "building $image (base $base_image, no network)"
    podman build -q --network none --pull=never --build-arg "BASE_IMAGE=$base_image" \
        -t "$image" -f "$ctx/Dockerfile" "$ctx" >/dev/null
    podman image inspect --format 'image.sh: image size {{.Size}} bytes' "$image" >&2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

find_fixture() {
    local name=l4-aws-gpu-operator-default-counters.prom dir
    for dir in "$root/tests/data/dcgm" "$root/exporter/vendors/nvidia/demo/data"; do
        if [[ -f "$dir/$name" ]]; then echo "$dir/$name"; return 0; fi
    done
    log "fixture $name not found under tests/data/dcgm or exporter/vendors/nvidia/demo/data"
    return 1
}

# Sets the globals fake_pid and dcgm_url (not a $(...) subshell: cleanup needs the pid).
start_fake_node() {
    local sockdir=$1 fixture deadline=$((SECONDS + 30))
    fixture=$(find_fixture)
    "$venv/bin/python" "$root/.ci/fake_node.py" "$sockdir" "$fixture" >"$work/fake_node.out" 2>"$work/fake_node.err" &
    fake_pid=$!
    until grep -q '^ready ' "$work/fake_node.out"; do
        if ! kill -0 "$fake_pid" 2>/dev/null || ((SECONDS > deadline)); then
            log "fake node did not start:"; cat "$work/fake_node.err" >&2; return 1
        fi
        sleep 0.2
    done
    dcgm_url=$(sed -n 's/^ready dcgm_url=\([^ ]*\) .*/\1/p' "$work/fake_node.out")
}

# Polls URL until its body matches PATTERN (grep -E) or the deadline passes, watching that
# container NAME is still running.
wait_for_match() {
    local url=$1 pattern=$2 container=$3 deadline=$((SECONDS + deadline_seconds))
    while ((SECONDS < deadline)); do
        if curl -fsS --max-time 5 "$url" -o "$work/body" 2>/dev/null \
                && grep -Eq "$pattern" "$work/body"; then
            return 0
        fi
        if [[ "$(podman inspect -f '{{.State.Running}}' "$container")" != "true" ]]; then
            log "container $container exited early:"; podman logs "$container" >&2; return 1
        fi
        sleep 0.5
    done
    log "no sample matching /$pattern/ at $url within ${deadline_seconds}s; container log:"
    podman logs "$container" >&2
    [[ -f "$work/body" ]] && { log "last body (head):"; head -n 20 "$work/body" >&2; }
    return 1
}

check_serve() {
    local sockdir="$work/pod-resources" port exit_code
    mkdir -p "$sockdir"
    start_fake_node "$sockdir"
    port=$(free_port)
    # The DaemonSet's restrictions, as far as podman has them: read-only root filesystem
    # (no tmpfs either), no capabilities, no privilege escalation.
    podman run -d --name "$name" --network host --read-only --read-only-tmpfs=false \
        --cap-drop ALL --security-opt no-new-privileges \
        -v "$sockdir:/var/lib/kubelet/pod-resources:ro" "$image" \
        --dcgm.url "$dcgm_url" --web.listen-address "127.0.0.1:$port" >/dev/null
    wait_for_match "http://127.0.0.1:$port/gpu/metrics" \
        '^DCGM_FI_DEV_GPU_UTIL\{.*pod="trainer-0"' "$name"
    grep -E '^DCGM_FI_DEV_GPU_UTIL\{' "$work/body" >&2
    podman stop -t 10 "$name" >/dev/null
    exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
    if [[ "$exit_code" != 0 ]]; then
        log "container exited $exit_code after SIGTERM (137 = killed: SIGTERM not handled)"
        podman logs "$name" >&2
        return 1
    fi
    log "serve: attributed samples served; exit 0 on SIGTERM"
}

check_demo() {
    local port
    port=$(free_port)
    podman run -d --name "$name-demo" --network host "$image" \
        demo --web.listen-address "127.0.0.1:$port" >/dev/null
    wait_for_match "http://127.0.0.1:$port/gpu/metrics" '^DCGM_FI_[A-Z_]+\{.*pod="' "$name-demo"
    podman stop -t 10 "$name-demo" >/dev/null
    log "demo: attributed samples served"
}

main() {
    local started=$SECONDS
    install_tools
    make_host_venv
    write_container_config
    make_base_tarball
    build_image
    check_serve
    check_demo
    log "passed in $((SECONDS - started))s"
}

main "$@"

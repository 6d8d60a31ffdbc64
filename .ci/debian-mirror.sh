#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt is configured with (the URI serving its own
# release suite), so debootstrap and the trixie promtool download use the same mirror apt
# already reaches. Falls back to deb.debian.org when nothing matches.
set -euo pipefail

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")

mirror_from_deb822() {
    # deb822 paragraphs: Types / URIs / Suites; the first paragraph listing our codename wins.
    awk -v want="$codename" '
        function flush() {
            if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " want " ") && uri != "" && !found) {
                print uri; found = 1
            }
            types = ""; suites = ""; uri = ""
        }
        /^[[:space:]]*$/ { flush(); next }
        /^Types:/  { sub(/^Types:[[:space:]]*/, ""); types = $0 }
        /^URIs:/   { sub(/^URIs:[[:space:]]*/, ""); split($0, u, /[[:space:]]+/); uri = u[1] }
        /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
        END { flush() }
    ' "$@" 2>/dev/null | head -n 1
}

mirror_from_list() {
    # One-line format: deb [options] URI SUITE COMPONENTS...
    awk -v want="$codename" '
        $1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            if ($(i + 1) == want) { print $i; exit }
        }
    ' "$@" 2>/dev/null | head -n 1
}

mirror=""
shopt -s nullglob
sources=(/etc/apt/sources.list.d/*.sources)
lists=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
if ((${#sources[@]})); then
    mirror=$(mirror_from_deb822 "${sources[@]}")
fi
if [[ -z "$mirror" ]]; then
    existing=()
    for f in "${lists[@]}"; do [[ -r "$f" ]] && existing+=("$f"); done
    if ((${#existing[@]})); then
        mirror=$(mirror_from_list "${existing[@]}")
    fi
fi
echo "${mirror:-http://deb.debian.org/debian}"

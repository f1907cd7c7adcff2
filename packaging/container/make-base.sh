#!/usr/bin/env bash
# Makes a Debian bookworm base image from Debian packages alone (for hosts
# that reach a Debian mirror but no container registry): debootstrap a
# minimal root file system and import it. Needs root, debootstrap and
# podman.
#   packaging/container/make-base.sh localhost/debian-bookworm-base
#   podman build --build-arg BASE=localhost/debian-bookworm-base …
set -euo pipefail
name=${1:-localhost/debian-bookworm-base}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"
tar -C "$root" -c . | podman import - "$name"
echo "imported $name"
